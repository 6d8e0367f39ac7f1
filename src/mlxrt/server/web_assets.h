#pragma once
/** The chat page's files (src/mlxrt/server/web/), built into the binary at build time by
 * cmake/embed_web.cmake: index.html is served at "/", every other file at "/ui/<name>". */
#include <span>
#include <string_view>

namespace mlxrt::server {

struct WebAsset {
  std::string_view path;          // where it is served: "/" or "/ui/<name>"
  std::string_view content_type;  // with its charset for text
  std::string_view body;
};

std::span<const WebAsset> web_assets();

}  // namespace mlxrt::server
