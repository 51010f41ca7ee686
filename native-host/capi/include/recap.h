/* The recap C API: load a .recap archive on a CPU or CUDA device, set and get its named
 * bindings, replay it. Generated from native-host/capi/src/lib.rs by cbindgen; do not edit. */

#ifndef RECAP_H
#define RECAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// Outcome of a call; on `RECAP_STATUS_ERROR`, `recap_last_error` says why.
typedef enum {
  RECAP_STATUS_OK = 0,
  RECAP_STATUS_ERROR = 1,
} RecapStatus;

// A device: the CPU or one CUDA GPU.
typedef struct RecapDevice RecapDevice;

// An archive loaded on a device, ready to replay.
typedef struct RecapGraph RecapGraph;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The reason for the last failed call on this thread, or "" if none failed. The string stays
// valid until the next failing call on the same thread.
const char *recap_last_error(void);

// Opens a device: "cpu", "cuda" (GPU 0) or "cuda:N". NULL on failure (no driver, no such GPU).
//
// # Safety
// `spec` is a NUL-terminated string.
RecapDevice *recap_device_open(const char *spec);

// Closes a device handle. Graphs loaded on it keep the device alive until they are freed.
//
// # Safety
// `device` is NULL or a handle from `recap_device_open`, freed once.
void recap_device_free(RecapDevice *device);

// Loads an archive file onto a device. NULL on failure.
//
// # Safety
// `path` is a NUL-terminated string; `device` a live device handle.
RecapGraph *recap_graph_load(const char *path, const RecapDevice *device);

// Frees a graph and its device memory.
//
// # Safety
// `graph` is NULL or a handle from `recap_graph_load`, freed once.
void recap_graph_free(RecapGraph *graph);

// Replays the graph once and waits for it to finish.
//
// # Safety
// `graph` is a live graph handle.
RecapStatus recap_graph_launch(RecapGraph *graph);

// Number of named bindings (inputs and outputs) of the graph; 0 for a NULL handle.
//
// # Safety
// `graph` is NULL or a live graph handle.
size_t recap_graph_binding_count(const RecapGraph *graph);

// Name of binding `index`, valid while the graph lives; NULL when out of range.
//
// # Safety
// `graph` is a live graph handle.
const char *recap_graph_binding_name(const RecapGraph *graph, size_t index);

// Size in bytes of a binding, written to `*bytes`.
//
// # Safety
// `graph` is a live graph handle, `name` a NUL-terminated string, `bytes` writable.
RecapStatus recap_graph_binding_size(const RecapGraph *graph, const char *name, size_t *bytes);

// Replaces a binding's contents with `len` bytes from `data`; `len` must be its exact size.
//
// # Safety
// `graph` is a live graph handle, `name` a NUL-terminated string, `data` `len` readable bytes.
RecapStatus recap_graph_set(RecapGraph *graph, const char *name, const void *data, size_t len);

// Copies a binding's contents into `out`; `len` must be its exact size.
//
// # Safety
// `graph` is a live graph handle, `name` a NUL-terminated string, `out` `len` writable bytes.
RecapStatus recap_graph_get(const RecapGraph *graph, const char *name, void *out, size_t len);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* RECAP_H */
