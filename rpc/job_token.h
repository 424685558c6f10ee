#pragma once
// The job token: a secret every rank of one job shares and presents on every call, so that a
// stray or hostile connection cannot inject tensors. The launcher makes it and passes it on in
// the environment.
#include <optional>
#include <string>

namespace pw::rpc {

inline constexpr const char* kJobTokenEnv = "PW_JOB_TOKEN";

// 128 random bits from std::random_device as 32 lowercase hex digits.
std::string make_job_token();
// PW_JOB_TOKEN, or nothing when unset; throws InputError when set but empty, longer than
// kMaxJobTokenChars or holding characters other than printable ASCII.
std::optional<std::string> job_token_from_env();
// Throws InputError naming `where` when the token is unusable (same rules as above).
void check_job_token(const std::string& token, const std::string& where);

}  // namespace pw::rpc
