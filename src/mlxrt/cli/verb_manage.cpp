// Port of mlx_lm/manage.py (mlx-lm 0.32.2): `mlxrt manage --scan` prints the Hugging Face cache's
// repos whose id contains --pattern (default "mlx") as mlx-lm's table; `--delete` lists them and,
// once confirmed (y/yes/1; n/no/0/empty declines), deletes each repo revision by revision.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/io/hf_cache.h"
#include "mlxrt/io/hf_cache_scan.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

/** One table cell: text is left-aligned, a number right-aligned, as str.format("{:W}") does. */
struct Cell {
  std::string text;
  bool number = false;
};

/** manage.py's tabulate: each column as wide as its widest cell or header, every cell followed by a space. */
std::string tabulate(const std::vector<std::vector<Cell>>& rows, const std::vector<std::string>& headers) {
  auto chars = [](const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  std::vector<size_t> widths;
  for (const auto& h : headers) widths.push_back(chars(h));
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], chars(row[i].text));
  auto line = [&](const std::vector<Cell>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string pad(widths[i] - chars(cells[i].text), ' ');
      out += cells[i].number ? pad + cells[i].text : cells[i].text + pad;
      out += " ";
    }
    return out;
  };
  std::vector<Cell> header_cells, dashes;
  for (size_t i = 0; i < headers.size(); ++i) {
    header_cells.push_back({headers[i]});
    dashes.push_back({std::string(widths[i], '-')});
  }
  std::string table = line(header_cells) + "\n" + line(dashes);
  for (const auto& row : rows) table += "\n" + line(row);
  return table;
}

std::string right(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

bool ask_for_confirmation(const std::string& message) {
  const std::string prompt = message + " (y/n) ";
  while (true) {
    std::cout << prompt << std::flush;
    std::string answer;
    if (!std::getline(std::cin, answer))
      throw UsageError("--delete: no answer on standard input; nothing was deleted");
    for (char& c : answer) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (answer == "y" || answer == "yes" || answer == "1") return true;
    if (answer == "n" || answer == "no" || answer == "0" || answer.empty()) return false;
    std::cout << "Invalid input. Must be one of: yes/no/y/n or empty for no\n";
  }
}

std::vector<const io::CachedRepo*> matching(const io::CacheScan& scan, const std::string& pattern) {
  std::vector<const io::CachedRepo*> repos;
  for (const auto& repo : scan.repos)
    if (repo.repo_id.find(pattern) != std::string::npos) repos.push_back(&repo);
  return repos;
}

void scan_verb(const std::string& pattern) {
  std::cout << "Scanning Hugging Face cache for models with pattern \"" << pattern << "\".\n" << std::flush;
  const auto scan = io::scan_hf_cache(io::hf_hub_cache_dir().path);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<std::vector<Cell>> rows;
  for (const auto* repo : matching(scan, pattern))
    rows.push_back({{repo->repo_id},
                    {repo->repo_type},
                    {right(io::format_cache_size(repo->size_on_disk), 12)},
                    {std::to_string(repo->nb_files), true},
                    {io::format_timesince(repo->last_accessed, now)},
                    {io::format_timesince(repo->last_modified, now)},
                    {repo->repo_path.string()}});
  std::cout << tabulate(rows, {"REPO ID", "REPO TYPE", "SIZE ON DISK", "NB FILES", "LAST_ACCESSED",
                               "LAST_MODIFIED", "LOCAL PATH"})
            << "\n";
}

void delete_verb(const std::string& pattern) {
  std::cout << "Deleting models matching pattern \"" << pattern << "\"\n" << std::flush;
  const auto scan = io::scan_hf_cache(io::hf_hub_cache_dir().path);
  const auto repos = matching(scan, pattern);
  if (repos.empty()) {
    std::cout << "No models found matching pattern \"" << pattern << "\"\n";
    return;
  }
  std::cout << "\nFound the following models:\n";
  std::vector<std::vector<Cell>> rows;
  for (const auto* repo : repos)
    rows.push_back({{repo->repo_id}, {io::format_cache_size(repo->size_on_disk)}, {repo->repo_path.string()}});
  std::cout << tabulate(rows, {"REPO ID", "SIZE", "LOCAL PATH"}) << "\n";
  if (!ask_for_confirmation("\nAre you sure you want to delete these models?")) {
    std::cout << "\nDeletion cancelled - no changes made.\n";
    return;
  }
  for (const auto* repo : repos) {
    std::cout << "\nDeleting " << repo->repo_id << "...\n" << std::flush;
    // One revision at a time against the scan taken above, in commit-hash order, as mlx-lm does.
    std::vector<std::string> hashes;
    for (const auto& rev : repo->revisions) hashes.push_back(rev.commit_hash);
    std::sort(hashes.begin(), hashes.end());
    for (const auto& hash : hashes) io::delete_cache_revisions(scan, {hash});
  }
  std::cout << "\nModel(s) deleted successfully.\n";
}

}  // namespace

void register_manage(CLI::App& app) {
  auto* cmd = app.add_subcommand("manage", "MLX Model Cache (as mlx_lm.manage): list or delete cached Hugging Face models");
  struct Flags {
    bool scan = false, del = false;
    std::string pattern = "mlx";
  };
  auto f = std::make_shared<Flags>();
  cmd->add_flag("--scan", f->scan, "Scan Hugging Face cache for mlx models.");
  cmd->add_flag("--delete", f->del, "Delete models matching the given pattern.");
  cmd->add_option("--pattern", f->pattern, "Model repos contain the pattern.")->capture_default_str();
  cmd->callback([f] {
    if (f->scan) scan_verb(f->pattern);
    if (f->del) delete_verb(f->pattern);
  });
}

}  // namespace mlxrt::cli
