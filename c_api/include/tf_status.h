/* pluggable C API: status objects.
 *
 * A TF_Status carries the outcome of a call: a code (TF_OK on success) and a
 * message. Functions that can fail take a `TF_Status*` as their last argument
 * and set it; the caller owns the status and reads it afterwards. The numeric
 * codes are part of the ABI and equal TensorFlow's. */
#ifndef PLUGGABLE_TF_STATUS_H_
#define PLUGGABLE_TF_STATUS_H_

#include "c_api_macros.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TF_Status TF_Status;

/* Error codes. Each non-OK code maps to one Python exception class in
 * `pluggable.errors` (for example TF_INVALID_ARGUMENT raises
 * InvalidArgumentError). */
typedef enum TF_Code {
  TF_OK = 0,
  TF_CANCELLED = 1,           /* the operation was cancelled */
  TF_UNKNOWN = 2,             /* an error with no better code */
  TF_INVALID_ARGUMENT = 3,    /* bad input independent of system state */
  TF_DEADLINE_EXCEEDED = 4,   /* a deadline passed before completion */
  TF_NOT_FOUND = 5,           /* a requested entity (op, kernel, file) is missing */
  TF_ALREADY_EXISTS = 6,      /* an entity being created already exists */
  TF_PERMISSION_DENIED = 7,   /* the caller may not do this */
  TF_UNAUTHENTICATED = 16,    /* no valid credentials */
  TF_RESOURCE_EXHAUSTED = 8,  /* out of memory or another resource */
  TF_FAILED_PRECONDITION = 9, /* the system is not in a state that allows it */
  TF_ABORTED = 10,            /* aborted, typically by a concurrency conflict */
  TF_OUT_OF_RANGE = 11,       /* an index or value past its valid range */
  TF_UNIMPLEMENTED = 12,      /* not supported by this implementation */
  TF_INTERNAL = 13,           /* an invariant of the implementation broke */
  TF_UNAVAILABLE = 14,        /* the service or device is unavailable */
  TF_DATA_LOSS = 15,          /* unrecoverable data loss or corruption */
} TF_Code;

/* Returns a new status with code TF_OK and an empty message. The caller owns
 * it and must release it with TF_DeleteStatus. Never returns NULL. */
TF_CAPI_EXPORT extern TF_Status* TF_NewStatus(void);

/* Releases a status made by TF_NewStatus. NULL is accepted and ignored. */
TF_CAPI_EXPORT extern void TF_DeleteStatus(TF_Status* s);

/* Sets the code and message. `msg` is copied (it may be freed after the call);
 * NULL is treated as "". Setting TF_OK clears the message. */
TF_CAPI_EXPORT extern void TF_SetStatus(TF_Status* s, TF_Code code,
                                        const char* msg);

/* Attaches a key/value payload to a non-OK status. Both strings are copied.
 * The core keeps payloads for diagnostics; setting a key twice replaces it. */
TF_CAPI_EXPORT extern void TF_SetPayload(TF_Status* s, const char* key,
                                         const char* value);

/* Calls `visitor(key, value, capture)` for each payload of `s`, in the order
 * they were set. The strings are valid only during the call. */
typedef void (*TF_PayloadVisitor)(const char* key, const char* value,
                                  void* capture);
TF_CAPI_EXPORT extern void TF_ForEachPayload(const TF_Status* s,
                                             TF_PayloadVisitor visitor,
                                             void* capture);

/* Sets `s` from an errno value (`error_code`) and a context string, mapping
 * common errno values (ENOENT, EACCES, ENOMEM, ...) to the matching TF_Code. */
TF_CAPI_EXPORT extern void TF_SetStatusFromIOError(TF_Status* s,
                                                   int error_code,
                                                   const char* context);

/* Returns the code of `s`. A NULL status reads as TF_INVALID_ARGUMENT. */
TF_CAPI_EXPORT extern TF_Code TF_GetCode(const TF_Status* s);

/* Returns the message of `s` (never NULL; "" when OK). The pointer stays valid
 * until the next change to `s` or its deletion. */
TF_CAPI_EXPORT extern const char* TF_Message(const TF_Status* s);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_TF_STATUS_H_ */
