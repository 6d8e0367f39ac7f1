#pragma once
/** The server writes its JSON as mlx_lm.server's json.dumps does (see util/python_json.h). */
#include "mlxrt/util/python_json.h"

namespace mlxrt::server {

using util::DumpOptions;
using util::python_dumps;
using util::python_float_repr;

}  // namespace mlxrt::server
