#include "mlxrt/server/request_guards.h"

#include <algorithm>
#include <cctype>

namespace mlxrt::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The host part of a Host header: "[::1]:8080" -> "::1", "localhost:8080" -> "localhost".
std::string host_name(std::string_view header) {
  header = trim(header);
  if (!header.empty() && header.front() == '[') {
    const auto close = header.find(']');
    return lower(header.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  const auto colon = header.find(':');
  if (colon != std::string_view::npos && header.find(':', colon + 1) == std::string_view::npos)
    header = header.substr(0, colon);
  if (!header.empty() && header.back() == '.') header.remove_suffix(1);  // "localhost." is localhost
  return lower(header);
}

// 127.0.0.0/8 written as a dotted quad (not a name that merely starts with "127.").
bool is_ipv4_loopback(std::string_view h) {
  int parts = 0;
  while (true) {
    size_t digits = 0;
    int value = 0;
    while (digits < h.size() && std::isdigit(static_cast<unsigned char>(h[digits])))
      value = value * 10 + (h[digits++] - '0');
    if (digits == 0 || digits > 3 || value > 255 || (parts == 0 && value != 127)) return false;
    ++parts;
    h.remove_prefix(digits);
    if (h.empty()) return parts == 4;
    if (h.front() != '.' || parts == 4) return false;
    h.remove_prefix(1);
  }
}

}  // namespace

bool is_loopback_host(std::string_view bound) {
  const std::string h = host_name(bound);
  return h == "localhost" || h == "::1" || h == "ip6-localhost" || is_ipv4_loopback(h);
}

bool host_allowed(std::string_view bound, std::string_view host_header) {
  if (!is_loopback_host(bound)) return true;
  if (trim(host_header).empty()) return true;
  const std::string h = host_name(host_header);
  return is_loopback_host(h) || h == host_name(bound);
}

bool json_content_type(std::string_view content_type) {
  const auto semicolon = content_type.find(';');
  const std::string media = lower(trim(content_type.substr(0, semicolon)));
  if (media.empty()) return true;
  if (media == "application/json") return true;
  const auto slash = media.find('/');
  return slash != std::string::npos && media.size() > 5 && media.compare(media.size() - 5, 5, "+json") == 0;
}

}  // namespace mlxrt::server
