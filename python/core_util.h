// What the binding's files (core.cc, core_remote.cc) share: the one place a
// non-OK Status becomes a Python exception (ThrowIfError, defined in core.cc:
// the class is picked by saturate.errors from the code's name, the message
// kept whole), and running C++ work with the GIL released.
//
// Thread-safety: call with the GIL held (WithoutGil releases it around fn).
#ifndef SATURATE_PYTHON_CORE_UTIL_H_
#define SATURATE_PYTHON_CORE_UTIL_H_

#include <nanobind/nanobind.h>

#include <utility>

#include "saturate/base/status.h"

namespace saturate::python {

// Raises the saturate.errors exception for a non-OK `status`; returns for OK.
void ThrowIfError(const Status& status);

template <typename T>
T ValueOrThrow(Result<T>&& result) {
  ThrowIfError(result.status());
  return std::move(*result);
}

// Runs fn() with the GIL released (it blocks or works) and returns its result.
template <typename Fn>
auto WithoutGil(Fn&& fn) {
  nanobind::gil_scoped_release release;
  return fn();
}

}  // namespace saturate::python

#endif  // SATURATE_PYTHON_CORE_UTIL_H_
