// Loading an NVIDIA library at run time (cuBLAS, cuBLASLt, CUPTI, NCCL): the
// plugin links none of them, so it builds without their headers and runs
// where they are absent, and each loader resolves only the functions it uses.
#ifndef PLUGGABLE_CUDA_DL_LIBRARY_H_
#define PLUGGABLE_CUDA_DL_LIBRARY_H_

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace pgcuda {

// *out = the function `name` of `lib`; false (with `name` appended to the
// comma-separated `missing`) when the library lacks it.
template <typename F>
bool dl_resolve(void* lib, const char* name, F* out, std::string* missing) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  *out = reinterpret_cast<F>(sym);
  return true;
}

// The first of `names` (null or empty ones skipped) that dlopen opens and
// `take(lib, &missing)` accepts (it resolves the functions it needs and
// keeps them; a library it refuses, naming what is missing, is closed).
// The library chosen stays loaded for the life of the process, and its name
// goes to `chosen` when given. Null when none is: `tried` then lists the
// names and `last_error` says what went wrong with the last one.
template <typename Take>
void* dl_open_first(std::initializer_list<const char*> names, Take take, std::string* tried,
                    std::string* last_error, std::string* chosen = nullptr) {
  for (const char* name : names) {
    if (name == nullptr || name[0] == '\0') continue;
    if (!tried->empty()) *tried += ", ";
    *tried += name;
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      if (err != nullptr) *last_error = err;
      continue;
    }
    std::string missing;
    if (!take(lib, &missing)) {
      *last_error = std::string(name) + " lacks " + missing;
      dlclose(lib);
      continue;
    }
    if (chosen != nullptr) *chosen = name;
    return lib;
  }
  return nullptr;
}

// The library's text for status `s` (through `text`, which may be null), or
// "<lib> status <s>" when it has none.
template <typename Text>
std::string dl_status_text(Text text, int s, const char* lib) {
  const char* t = text != nullptr ? text(s) : nullptr;
  return t != nullptr ? std::string(t) : std::string(lib) + " status " + std::to_string(s);
}

// "<what> could not be loaded (tried <tried>) [<last_error>]: <advice>", the
// error of a loader that found no library.
inline std::string dl_load_error(const char* what, const std::string& tried,
                                 const std::string& last_error, const std::string& advice) {
  std::string e = std::string(what) + " could not be loaded (tried " + tried + ")";
  if (!last_error.empty()) e += " [" + last_error + "]";
  return e + ": " + advice;
}

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_DL_LIBRARY_H_
