// A small Beast HTTP client for the server tests: one request per connection,
// the whole response read (chunked bodies decoded by Beast), and the SSE
// events of a streamed body split out.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline tcp::socket connect_to(net::io_context& io, uint16_t port) {
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  return socket;
}

inline HttpReply http_request(uint16_t port, http::verb verb, const std::string& target, const std::string& body = "",
                              const std::map<std::string, std::string>& headers = {}) {
  net::io_context io;
  tcp::socket socket = connect_to(io, port);
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, "127.0.0.1");
  request.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.body() = body;
  request.prepare_payload();
  beast::error_code ec;
  http::write(socket, request, ec);  // a server that refuses the body may stop reading it: read its answer anyway
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(uint64_t{1} << 30);
  http::read(socket, buffer, parser, ec);
  HttpReply reply;
  if (ec && ec != http::error::end_of_stream) {
    reply.status = -1;
    reply.body = ec.message();
    return reply;
  }
  const auto& response = parser.get();
  reply.status = static_cast<int>(response.result_int());
  for (const auto& field : response) reply.headers[std::string(field.name_string())] = std::string(field.value());
  reply.body = response.body();
  return reply;
}

inline HttpReply post(uint16_t port, const std::string& target, const std::string& body,
                      const std::map<std::string, std::string>& headers = {}) {
  return http_request(port, http::verb::post, target, body, headers);
}

inline HttpReply get(uint16_t port, const std::string& target) { return http_request(port, http::verb::get, target); }

// The payloads of "data: ..." events, in order ("[DONE]" included as such).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    const std::string event = body.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (event.rfind("data: ", 0) == 0) events.push_back(event.substr(6));
    if (end == std::string::npos) break;
    at = end + 2;
  }
  return events;
}

}  // namespace tessera::testing
