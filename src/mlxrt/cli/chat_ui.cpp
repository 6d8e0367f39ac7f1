#include "mlxrt/cli/chat_ui.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>

namespace mlxrt::cli {

namespace {

// The mlx_lm theme as rich renders it.
const char* kReset = "\x1b[0m";
const char* kBorder = "\x1b[34m";      // ui.border: blue
const char* kAccent = "\x1b[1;35m";    // ui.accent: bold magenta
const char* kLabel = "\x1b[39m";       // ui.label: default
const char* kStrong = "\x1b[1m";       // ui.strong: bold
const char* kMuted = "\x1b[38;5;244m"; // ui.muted: grey50
const char* kGood = "\x1b[1;32m";      // ui.good: bold green

std::string styled(const char* style, const std::string& text) { return std::string(style) + text + kReset; }

/** Display cells of UTF-8 text (one per code point: the strings here are not wide). */
int cells(const std::string& s) {
  int n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

void out(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

}  // namespace

std::string with_thousands(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n), res;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) res += ',';
    res += digits[i];
  }
  return n < 0 ? "-" + res : res;
}

ChatUI::ChatUI() : width_(120) {
  if (const char* env = std::getenv("COLUMNS")) {
    int v = std::atoi(env);
    if (v > 0) {
      width_ = v;
      return;
    }
  }
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width_ = ws.ws_col;
}

namespace {

/** One display cell of styled text. */
struct Cell {
  std::string ch;
  const char* style;  // nullptr: unstyled
};

std::vector<Cell> to_cells(const std::string& text, const char* style) {
  std::vector<Cell> out;
  for (size_t i = 0; i < text.size();) {
    size_t j = i + 1;
    while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    out.push_back({text.substr(i, j - i), style});
    i = j;
  }
  return out;
}

bool is_space(const Cell& c) { return c.ch == " "; }

/** rich's divide_line with fold=True: words are \s*\S+\s*; a word that does not fit starts a new
 * line, a word wider than the line is chopped into line-wide pieces. Returns the break offsets. */
std::vector<size_t> divide_line(const std::vector<Cell>& cells, int width) {
  std::vector<size_t> breaks;
  int offset = 0;
  for (size_t start = 0; start < cells.size();) {
    size_t end = start;
    while (end < cells.size() && is_space(cells[end])) ++end;
    while (end < cells.size() && !is_space(cells[end])) ++end;
    size_t bare_end = end;
    while (end < cells.size() && is_space(cells[end])) ++end;
    const int word_len = static_cast<int>(bare_end - start);
    const int full_len = static_cast<int>(end - start);
    if (width - offset >= word_len) {
      offset += full_len;
    } else if (word_len > width) {
      for (size_t piece = start; piece < end; piece += width) {
        if (piece) breaks.push_back(piece);
        offset = static_cast<int>(std::min(end, piece + width) - piece);
      }
    } else {
      breaks.push_back(start);
      offset = full_len;
    }
    start = end;
  }
  return breaks;
}

/** Cells as rich writes them: each run of one style wrapped in its escape codes. */
std::string render(const std::vector<Cell>& cells) {
  std::string s;
  for (size_t i = 0; i < cells.size();) {
    size_t j = i;
    std::string run;
    while (j < cells.size() && cells[j].style == cells[i].style) run += cells[j++].ch;
    s += cells[i].style ? styled(cells[i].style, run) : run;
    i = j;
  }
  return s;
}

}  // namespace

void ChatUI::header(const std::string& title, const std::vector<std::pair<std::string, std::string>>& rows) const {
  size_t label_w = 0;
  for (const auto& [k, v] : rows) label_w = std::max<size_t>(label_w, cells(k));
  const int inner = width_ - 2 - 4;  // borders, then padding (0, 2)
  std::string s;
  // ╭─ title ─────╮
  const int fill = width_ - 4 - (cells(title) + 2);
  s += styled(kBorder, "╭─") + styled(kBorder, " ") + styled(kAccent, title) + styled(kBorder, " ") +
       styled(kBorder, repeat("─", std::max(fill, 0))) + styled(kBorder, "─╮") + "\n";
  for (const auto& [k, v] : rows) {
    // "  [ui.label]{k.ljust(label_w)}[/ui.label]   [ui.strong]{v}[/ui.strong]", wrapped to the panel.
    std::vector<Cell> body = to_cells("  ", nullptr);
    for (auto& c : to_cells(k + std::string(label_w - cells(k), ' '), kLabel)) body.push_back(c);
    for (auto& c : to_cells("   ", nullptr)) body.push_back(c);
    for (auto& c : to_cells(v, kStrong)) body.push_back(c);
    auto breaks = divide_line(body, inner);
    breaks.push_back(body.size());
    size_t from = 0;
    for (size_t to : breaks) {
      std::vector<Cell> line(body.begin() + from, body.begin() + to);
      while (static_cast<int>(line.size()) > inner && is_space(line.back())) line.pop_back();  // rstrip_end
      std::vector<Cell> padded = to_cells("  ", nullptr);
      padded.insert(padded.end(), line.begin(), line.end());
      for (auto& c : to_cells(std::string(inner - line.size() + 2, ' '), nullptr)) padded.push_back(c);
      s += styled(kBorder, "│") + render(padded) + styled(kBorder, "│") + "\n";
      from = to;
    }
  }
  s += styled(kBorder, "╰" + repeat("─", width_ - 2) + "╯") + "\n";
  out(s);
}

void ChatUI::help() const {
  out("  " + styled(kLabel, "commands") + "    " + styled(kStrong, "q") + " " + styled(kMuted, "exit") + "   " +
      styled(kStrong, "r") + " " + styled(kMuted, "reset") + "   " + styled(kStrong, "h") + " " +
      styled(kMuted, "help") + "\n");
}

void ChatUI::before_input() const {
  auto dashes = repeat("─", std::max(width_ - 1, 10));
  out(styled(kMuted, dashes) + "\n\n" + styled(kMuted, dashes) + "\n");
  out("\x1b[2A\r");  // up two rows onto the blank middle line
  // readline's invisible-text markers around the escape codes, as mlx-lm hands the prompt to input().
  out(std::string("\x01") + kAccent + "\x02" + "›" + "\x01" + kReset + "\x02" + " ");
  std::fflush(stdout);
}

void ChatUI::after_input() const {
  out("\n");
  std::fflush(stdout);
}

void ChatUI::say_bye() const { out(styled(kMuted, "bye") + "\n"); }

void ChatUI::say_interrupted(const std::string& label, const std::string& text) const {
  out("  " + styled(kGood, label) + " " + styled(kMuted, text) + "\n");
  std::fflush(stdout);
}

void ChatUI::say_reset() const { out("  " + styled(kGood, "reset") + " " + styled(kMuted, "context cleared") + "\n"); }

void ChatUI::stream_text(const std::string& text) const {
  out(text);
  std::fflush(stdout);
}

void ChatUI::print_wrapped(const std::string& style, const std::string& text) const {
  // rich's word wrap: words keep their trailing space; a line takes words while the word itself
  // (without that space) still fits.
  std::vector<std::string> words;
  for (size_t i = 0; i < text.size();) {
    size_t j = text.find(' ', i);
    while (j != std::string::npos && j + 1 < text.size() && text[j + 1] == ' ') ++j;
    size_t end = j == std::string::npos ? text.size() : j + 1;
    words.push_back(text.substr(i, end - i));
    i = end;
  }
  std::string line;
  std::vector<std::string> lines;
  for (const auto& w : words) {
    std::string bare = w.substr(0, w.find_last_not_of(' ') + 1);
    if (!line.empty() && cells(line) + cells(bare) > width_) {
      lines.push_back(line);
      line.clear();
    }
    line += w;
  }
  if (!line.empty()) lines.push_back(line);
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) {
    // The leading spaces of the first line sit before the markup: unstyled.
    auto l = lines[i];
    size_t lead = i == 0 ? l.find_first_not_of(' ') : 0;
    if (lead == std::string::npos) lead = 0;
    s += l.substr(0, lead) + style + l.substr(lead) + kReset + "\n";
  }
  out(s);
}

void ChatUI::end_turn(int generation_tokens, double generation_tps, double prompt_tps, double peak_memory) const {
  out("\n");
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %d tokens · %.1f tok/s · prompt %.1f tok/s · peak %.2f GB", generation_tokens,
                generation_tps, prompt_tps, peak_memory);
  print_wrapped(kMuted, buf);
  std::fflush(stdout);
}

}  // namespace mlxrt::cli
