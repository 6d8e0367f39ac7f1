#pragma once
/** Checks on a request's headers that protect a local server from web pages (DNS rebinding and
 * cross-site "simple" requests), made before any routing. */
#include <string>
#include <string_view>

namespace mlxrt::server {

/** Whether `bound` (the --host the server listens on) is a loopback address or name. */
bool is_loopback_host(std::string_view bound);

/** DNS rebinding: a page whose name resolves to 127.0.0.1 reaches a loopback server through the
 * browser, with its own name in Host. A server bound to a loopback address answers only Host
 * values naming a loopback address or the bound host (any port); one bound elsewhere answers all.
 * An absent Host (HTTP/1.0) is allowed. */
bool host_allowed(std::string_view bound, std::string_view host_header);

/** The request bodies the server parses are JSON: a Content-Type that is present must be
 * application/json or a +json type (parameters such as charset allowed). Browsers send
 * text/plain, form and multipart bodies cross-site without asking first; those are refused. */
bool json_content_type(std::string_view content_type);

}  // namespace mlxrt::server
