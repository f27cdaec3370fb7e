// The web page's files (web/ in the repository), compiled in by CMakeLists.txt.
#pragma once

#include <cstddef>
#include <string_view>

namespace drama::server {

struct WebAsset {
  const char* name;  // file name under web/, e.g. "index.html"
  const char* content_type;
  const char* data;
  size_t size;
};

// Ends with an entry whose name is null (generated/web_assets.cpp).
extern const WebAsset kWebAssets[];

// nullptr when web/ has no such file.
inline const WebAsset* find_web_asset(std::string_view name) {
  for (const WebAsset* a = kWebAssets; a->name; ++a)
    if (name == a->name) return a;
  return nullptr;
}

}  // namespace drama::server
