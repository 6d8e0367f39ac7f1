#pragma once
/** The text `mlxrt fidelity` measures on unless --corpus names another: original English prose of
 * several kinds (essay, dialogue, instructions, a table of numbers, a code snippet), fixed so that
 * two runs of the harness, on any machine, see the same tokens. */
#include <string_view>

namespace mlxrt::cli {

/** The built-in corpus (about 8 KB of UTF-8: some 2,000 tokens for Qwen3, Llama 3 or Gemma 3). */
std::string_view fidelity_corpus();

}  // namespace mlxrt::cli
