/* pluggable C API: common macros.
 *
 * Every public header of the pluggable C API includes this file. It defines
 * the export macro used on every TF_* function the core provides, the boolean
 * type used in ABI structs, and the macro that computes the `*_STRUCT_SIZE`
 * constants used for versioning (see stream_executor.h). */
#ifndef PLUGGABLE_C_API_MACROS_H_
#define PLUGGABLE_C_API_MACROS_H_

#include <stddef.h>

/* Marks a function that the core runtime exports. Plugins leave these symbols
 * unresolved at link time; the dynamic loader binds them to the core when the
 * plugin is loaded. */
#ifndef TF_CAPI_EXPORT
#if defined(_WIN32)
#define TF_CAPI_EXPORT __declspec(dllimport)
#else
#define TF_CAPI_EXPORT __attribute__((visibility("default")))
#endif
#endif

/* A one-byte boolean used inside ABI structs (0 is false, anything else true).
 * A fixed-size type keeps struct layouts identical between C and C++. */
typedef unsigned char TF_Bool;

/* Size of TYPE up to and including MEMBER. Each `*_STRUCT_SIZE` macro is
 * defined with this so that a struct that later grows keeps the old size
 * constant for the fields that existed before. */
#define TF_OFFSET_OF_END(TYPE, MEMBER) \
  (offsetof(TYPE, MEMBER) + sizeof(((TYPE*)0)->MEMBER))

#endif /* PLUGGABLE_C_API_MACROS_H_ */
