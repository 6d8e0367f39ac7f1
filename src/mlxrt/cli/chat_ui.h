#pragma once
/** The terminal output of mlx_lm.chat (mlx_lm/cli_ui.py @ mlx-lm 0.32.2), byte for byte: rich's
 * rendering of its header panel, help line, input "corridor" and per-turn statistics, with the
 * same theme colours (rich prints them whether or not stdout is a terminal, as mlx-lm asks it to). */
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mlxrt::cli {

class ChatUI {
 public:
  /** Width as mlx-lm takes it: $COLUMNS, else the terminal's, else 120. */
  ChatUI();
  explicit ChatUI(int width) : width_(width) {}

  int width() const { return width_; }
  /** The boxed header: title, then "label   value" rows. */
  void header(const std::string& title, const std::vector<std::pair<std::string, std::string>>& rows) const;
  void help() const;
  /** Draws the input corridor and prints the prompt marker; the caller reads the line, then calls
   * after_input(). */
  void before_input() const;
  void after_input() const;
  void say_bye() const;
  void say_reset() const;
  /** Ctrl-C (ours; mlx_lm.chat dies with a traceback): "  stopped  <what happens next>", after a
   * cut answer or at the prompt. */
  void say_interrupted(const std::string& label, const std::string& text) const;
  void stream_text(const std::string& text) const;
  /** Ends a turn: a newline, then the statistics line. */
  void end_turn(int generation_tokens, double generation_tps, double prompt_tps, double peak_memory) const;

 private:
  /** console.print of one muted line, wrapped at the width as rich wraps words. */
  void print_wrapped(const std::string& style, const std::string& text) const;
  int width_;
};

/** Python's f"{n:,}". */
std::string with_thousands(long long n);

}  // namespace mlxrt::cli
