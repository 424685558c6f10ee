#pragma once
// Byte quantities as users write them ("512MiB", "2GiB", "1e9") and as we print them.
#include <cstdint>
#include <string>
#include <string_view>

namespace pw {

// Parses "123", "64KiB", "512MiB", "2GiB", "1.5GB", "4kB". Throws InputError naming the accepted forms.
std::int64_t parse_bytes(std::string_view text);
std::string format_bytes(std::int64_t bytes);

}  // namespace pw
