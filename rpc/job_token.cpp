#include "rpc/job_token.h"

#include <cstdlib>
#include <random>

#include "core/error.h"
#include "rpc/frame_check.h"

namespace pw::rpc {

std::string make_job_token() {
  std::random_device device;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int word = 0; word < 4; ++word) {
    std::uint32_t bits = device();
    for (int nibble = 0; nibble < 8; ++nibble, bits >>= 4) token.push_back(kHex[bits & 0xF]);
  }
  return token;
}

void check_job_token(const std::string& token, const std::string& where) {
  PW_INPUT_CHECK(!token.empty(), where << " is empty; expected the job token (e.g. 32 hex digits)");
  PW_INPUT_CHECK(token.size() >= kMinJobTokenChars,
                 where << " has " << token.size() << " characters; a job token needs at least " << kMinJobTokenChars
                       << " (a short one is guessed; e.g. 32 hex digits: openssl rand -hex 16)");
  PW_INPUT_CHECK(token.size() <= kMaxJobTokenChars,
                 where << " has " << token.size() << " characters; at most " << kMaxJobTokenChars << " are accepted");
  for (const char c : token)
    PW_INPUT_CHECK(c > ' ' && c < 0x7F, where << " holds a character other than printable ASCII");
}

std::optional<std::string> job_token_from_env() {
  const char* value = std::getenv(kJobTokenEnv);
  if (value == nullptr) return std::nullopt;
  std::string token(value);
  check_job_token(token, kJobTokenEnv);
  return token;
}

}  // namespace pw::rpc
