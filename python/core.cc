// saturate._core: the Python binding of the C++ library (nanobind).
//
// Thin by design: it converts options, releases the GIL around every call
// that blocks or works, and exports batch tensors through DLPack without
// copying. Ownership: every large tensor of a batch holds one reference to a
// capsule that owns the C++ Batch; the batch buffer returns to the loader's
// pool when the last tensor viewing it is released. Small tensors (labels)
// are copied, see kCopyBelowBytes. With a CUDA device every tensor is a
// view of a pooled device buffer, exported as a kDLCUDA tensor that is ready
// on the stream passed to next(). A non-OK Status becomes a
// Python exception in exactly one place, ThrowIfError(). The Python package
// (python/saturate) holds the user-facing API on top of this module.
//
// Thread-safety: a Loader is used from one Python thread at a time (the GIL
// and the C++ Loader's single-consumer rule); pack and verify calls are
// independent. A Phase object is entered by one thread at a time; the trace
// functions may be called from any thread.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core_util.h"
#include "saturate/base/status.h"
#include "saturate/checkpoint/checkpointer.h"
#include "saturate/feed/device_loader.h"
#include "saturate/feed/loader.h"
#include "saturate/format/verify.h"
#include "saturate/formats/source.h"
#include "saturate/pack/pack.h"
#include "saturate/remote/range_reader.h"
#include "saturate/trace/trace.h"
#include "saturate/watch/watcher.h"
#include "watch/job_labels.h"
#include "watch/metrics_server.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace saturate::python {
void BindRemote(nb::module_& m);  // core_remote.cc

// The one place a Status becomes a Python exception (core_util.h).
void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  nb::object errors = nb::module_::import_("saturate.errors");
  nb::object cls = errors.attr("error_class")(std::string(StatusCodeName(status.code())));
  PyErr_SetString(cls.ptr(), status.message().c_str());
  throw nb::python_error();
}

namespace {

// How often a blocked Next() comes back to check for Ctrl-C.
constexpr auto kSignalPoll = std::chrono::milliseconds(50);

nb::dlpack::dtype ToDlpack(format::DType dtype) {
  using format::DType;
  switch (dtype) {
    case DType::kUInt8:
      return nb::dtype<uint8_t>();
    case DType::kInt32:
      return nb::dtype<int32_t>();
    case DType::kInt64:
      return nb::dtype<int64_t>();
    case DType::kFloat16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kFloat32:
      return nb::dtype<float>();
    case DType::kBFloat16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  return nb::dtype<uint8_t>();
}

enum class Framework { kNumpy, kTorch, kJax, kDlpack };

// Tensors smaller than this (labels, lengths) are copied out of the batch
// buffer, so that keeping them (e.g. labels for metrics) never pins a buffer;
// larger ones (images) are views of it.
constexpr size_t kCopyBelowBytes = 16 << 10;

template <typename Fw>
nb::object Export(const feed::TensorView& t, void* data, nb::handle owner) {
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  const bool on_gpu = t.cuda_device >= 0;
  nb::ndarray<Fw> array(data, shape.size(), shape.data(), owner,
                        t.strides.empty() ? nullptr : t.strides.data(), ToDlpack(t.dtype),
                        on_gpu ? nb::device::cuda::value : nb::device::cpu::value,
                        on_gpu ? t.cuda_device : 0);
  return array.cast(nb::rv_policy::reference);
}

// `t` as a tensor of framework `fw`: a view kept alive by `batch_owner`, or
// for small host tensors a copy that owns its memory.
nb::object ExportAs(Framework fw, const feed::TensorView& t, nb::handle batch_owner) {
  void* data = t.data;
  nb::object owner = nb::borrow(batch_owner);
  if (t.bytes() < kCopyBelowBytes && t.cuda_device < 0) {
    auto* copy = new std::byte[std::max<size_t>(t.bytes(), 1)];
    std::memcpy(copy, t.data, t.bytes());
    data = copy;
    owner = nb::capsule(copy, [](void* p) noexcept { delete[] static_cast<std::byte*>(p); });
  }
  switch (fw) {
    case Framework::kTorch:
      return Export<nb::pytorch>(t, data, owner);
    case Framework::kJax:
      return Export<nb::jax>(t, data, owner);
    case Framework::kDlpack:
      return Export<nb::array_api>(t, data, owner);
    case Framework::kNumpy:
      break;
  }
  return Export<nb::numpy>(t, data, owner);
}

nb::dict StatsDict(const feed::LoaderStats& s) {
  nb::dict d;
  d["samples"] = s.samples;
  d["skipped"] = s.skipped;
  d["read_ns"] = s.read_ns;
  d["decode_ns"] = s.decode_ns;
  d["transform_ns"] = s.transform_ns;
  d["batches_ready"] = s.batches_ready;
  d["batches_delivered"] = s.batches_delivered;
  d["wait_ns"] = s.wait_ns;
  d["threads"] = s.threads;
  d["prefetch"] = s.prefetch;
  d["autotune_reason"] = s.autotune_reason;
  d["h2d_bytes"] = s.h2d_bytes;
  d["h2d_batches"] = s.h2d_batches;
  d["device_buffers"] = s.device_buffers;
  // DeviceLoader's JPEG decode ("cpu" for a host loader).
  d["decode"] = s.decode.empty() ? std::string("cpu") : s.decode;
  d["decode_backend"] = s.decode_backend;
  d["gpu_decoded"] = s.gpu_decoded;
  d["gpu_decode_ns"] = s.gpu_decode_ns;
  d["gpu_decode_fallbacks"] = s.gpu_decode_fallbacks;
  d["gpu_decode_cut"] = s.gpu_decode_cut;
  d["gpu_decode_fraction"] = s.gpu_decode_fraction;
  d["cpu_decode_images_per_s_per_thread"] = s.cpu_decode_images_per_s_per_thread;
  d["gpu_decode_images_per_s"] = s.gpu_decode_images_per_s;
  // Remote datasets (zero for local ones).
  d["remote_requests"] = s.remote.requests;
  d["remote_bytes_fetched"] = s.remote.bytes_fetched;
  d["remote_retries"] = s.remote.retries;
  d["remote_errors"] = s.remote.errors;
  d["remote_request_ns"] = s.remote.request_ns;
  d["remote_in_flight"] = s.remote.in_flight;
  d["cache_hits"] = s.remote.cache_hits;
  d["cache_misses"] = s.remote.cache_misses;
  d["cache_checksum_failures"] = s.remote.cache_checksum_failures;
  d["cache_write_errors"] = s.remote.cache_write_errors;
  d["cache_evictions"] = s.remote.cache_evictions;
  return d;
}

// A Python progress callback `fn(done, total, ...)` for C++ code that calls it
// from its own threads, one call at a time, while the GIL is released: at
// most ten calls a second (and the last), each under the GIL. An exception
// it raises is reported as unraisable; the work goes on. Borrows `fn`, which
// must outlive the work.
class PyProgress {
 public:
  PyProgress(const nb::object& fn, const char* where) : fn_(fn), where_(where) {}

  template <typename... More>
  void operator()(uint64_t done, uint64_t total, More... more) {
    auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    nb::gil_scoped_acquire gil;
    try {
      fn_(done, total, more...);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable(where_);
    }
  }

 private:
  const nb::object& fn_;
  const char* where_;
  std::chrono::steady_clock::time_point last_ =
      std::chrono::steady_clock::now() - std::chrono::seconds(1);
};

// A Loader, or with a CUDA device a DeviceLoader, behind feed::BatchSource.
class PyLoader {
 public:
  // `open_progress(done, total)`, unless None, is called while files read
  // where they lie get their JPEG tables on first open.
  PyLoader(feed::LoaderOptions options, const std::string& device, int device_prefetch,
           const std::string& decode, const nb::object& open_progress) {
    PyProgress progress(open_progress, "saturate.Loader open_progress");
    if (!open_progress.is_none()) {
      options.open_progress = [&](uint64_t done, uint64_t total) { progress(done, total); };
    }
    if (device == "cpu") {
      if (decode != "cpu" && decode != "auto") {
        throw nb::value_error(("decode=\"" + decode +
                               "\" needs a CUDA device (device=\"cuda\"); a host loader "
                               "decodes on the CPU")
                                  .c_str());
      }
      auto loader = ValueOrThrow(WithoutGil([&] { return feed::Loader::Open(options); }));
      host_ = loader.get();
      source_ = std::move(loader);
    } else {
      feed::DeviceOptions d{device, device_prefetch, decode};
      auto loader = ValueOrThrow(WithoutGil([&] { return feed::DeviceLoader::Open(options, d); }));
      device_ = loader.get();
      host_ = &loader->host();
      source_ = std::move(loader);
    }
  }

  // The next batch's tensors by name, or None at the epoch's end; with
  // `with_info`, a tuple (tensors, info) whose info has the batch's epoch,
  // index, size and the C++ address of each tensor (for tests).
  // Blocks in short slices so that Ctrl-C raises KeyboardInterrupt promptly.
  // On a device, the batch is ready for work on `stream` (a cudaStream_t as
  // an integer; 0 is the default stream).
  nb::object Next(Framework fw, bool with_info, uintptr_t stream) {
    // Keep the GIL when the batch is already there (the workers never take it).
    if (!source_->WaitForNext(std::chrono::nanoseconds(0))) {
      while (!WithoutGil([&] { return source_->WaitForNext(kSignalPoll); })) {
        if (PyErr_CheckSignals() != 0) throw nb::python_error();
      }
    }
    if (device_ != nullptr) device_->set_stream(reinterpret_cast<void*>(stream));
    // Ready: the host loader never blocks; the device stage only enqueues copies.
    std::optional<feed::Batch> batch = ValueOrThrow(source_->Next());
    if (!batch) return nb::none();
    auto* owned = new feed::Batch(std::move(*batch));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<feed::Batch*>(p); });
    nb::dict tensors;
    for (const feed::TensorView& t : owned->tensors()) {
      tensors[t.name.c_str()] = ExportAs(fw, t, owner);
    }
    if (!with_info) return tensors;
    nb::dict info, addresses;
    for (const feed::TensorView& t : owned->tensors()) {
      addresses[t.name.c_str()] = reinterpret_cast<uintptr_t>(t.data);
    }
    info["epoch"] = owned->epoch();
    info["index"] = owned->index();
    info["size"] = owned->size();
    info["addresses"] = addresses;
    return nb::make_tuple(tensors, info);
  }

  void SetEpoch(uint64_t epoch) {
    ThrowIfError(WithoutGil([&] { return source_->SetEpoch(epoch); }));
  }

  std::string StateJson() const { return source_->state().ToJson(); }

  void RestoreJson(const std::string& json) {
    feed::LoaderState state = ValueOrThrow(feed::LoaderState::FromJson(json));
    ThrowIfError(WithoutGil([&] { return source_->Restore(state); }));
  }

  feed::LoaderStats Stats() const { return source_->stats(); }
  // The host-side loader (the whole loader on the CPU path).
  const feed::Loader& loader() const { return *host_; }
  int device_index() const { return device_ != nullptr ? device_->device_index() : -1; }

 private:
  std::unique_ptr<feed::BatchSource> source_;
  const feed::Loader* host_ = nullptr;    // owned by source_
  feed::DeviceLoader* device_ = nullptr;  // source_ itself, on a GPU
};

feed::LoaderOptions MakeLoaderOptions(const std::string& dataset, uint64_t batch_size, bool shuffle,
                                      uint64_t seed, bool drop_last, std::optional<uint32_t> rank,
                                      std::optional<uint32_t> world_size, bool drop_uneven,
                                      int threads, int prefetch, uint64_t ram_cap_bytes,
                                      int max_held_batches, bool skip_bad,
                                      const std::vector<std::string>& transforms) {
  feed::LoaderOptions o;
  o.dataset = dataset;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  o.rank = rank;
  o.world_size = world_size;
  o.drop_uneven = drop_uneven;
  o.threads = threads;
  o.prefetch = prefetch;
  o.ram_cap_bytes = ram_cap_bytes;
  o.max_held_batches = max_held_batches;
  o.skip_bad = skip_bad;
  for (const std::string& spec : transforms) {
    o.fields.push_back(ValueOrThrow(feed::ParseFieldOptions(spec)));
  }
  return o;
}

nb::dict SummaryDict(const pack::PackSummary& s) {
  nb::dict d;
  d["records"] = s.records;
  d["bytes"] = s.bytes;
  d["input_bytes"] = s.input_bytes;
  d["shards"] = s.shards;
  d["skipped"] = s.skipped;
  d["skip_notes"] = s.skip_notes;
  d["ignored_files"] = s.ignored_files;
  d["seconds"] = s.seconds;
  return d;
}

// Runs a pack function without the GIL and returns its summary.
template <typename Fn>
nb::dict RunPack(Fn&& fn) {
  return SummaryDict(ValueOrThrow(WithoutGil(fn)));
}

// The options every pack_* function takes besides its source, as Python sets them.
void InitPackOptions(pack::PackOptions* o, uint64_t shard_bytes, int threads, bool force,
                     bool skip_bad, int reencode_max_side, int reencode_quality,
                     bool keep_jpeg_bytes) {
  new (o) pack::PackOptions();
  o->shard_bytes = shard_bytes;
  o->threads = threads;
  o->force = force;
  o->skip_bad = skip_bad;
  o->reencode_max_side = reencode_max_side;
  o->reencode_quality = reencode_quality;
  o->keep_jpeg_bytes = keep_jpeg_bytes;
}

// saturate._parquet's records for pack::PackStream: each item of `batches` is
// (file, first_row, columns, bad): one list per schema field of the rows'
// values (bytes or str for bytes/image fields, int, float), and {row: message}
// for the rows that are bad. Pulled with the GIL held, on the packing thread;
// a Python exception stops the pack and is raised again from pack_stream.
class PyBatchStream {
 public:
  PyBatchStream(nb::iterator batches, std::vector<format::FieldKind> kinds)
      : batches_(std::move(batches)), kinds_(std::move(kinds)) {}

  Result<bool> Next(pack::StreamRecord* record) {
    if (pos_ == records_.size()) {
      records_.clear();
      pos_ = 0;
      if (done_) return false;
      nb::gil_scoped_acquire gil;
      try {
        while (records_.empty() && !done_) Pull();
      } catch (nb::python_error& e) {
        error_.emplace(std::move(e));
        return Status::Cancelled("stopped by a Python exception");
      } catch (const std::exception& e) {
        return Status::InvalidArgument(std::string("pack_stream: ") + e.what());
      }
      if (records_.empty()) return false;
    }
    *record = std::move(records_[pos_++]);
    return true;
  }

  // Raises the Python exception that stopped the pack, if one did (GIL held).
  void RaiseIfStopped() {
    if (!error_) return;
    nb::python_error e = std::move(*error_);
    error_.reset();
    throw std::move(e);
  }

 private:
  void Pull() {
    if (batches_ == nb::iterator::sentinel()) {
      done_ = true;
      return;
    }
    nb::handle item = *batches_;
    nb::tuple batch = nb::cast<nb::tuple>(item);
    const std::string file = nb::cast<std::string>(batch[0]);
    const uint64_t first_row = nb::cast<uint64_t>(batch[1]);
    nb::list columns = nb::cast<nb::list>(batch[2]);
    nb::dict bad = nb::cast<nb::dict>(batch[3]);
    if (columns.size() != kinds_.size()) {
      throw std::runtime_error(std::to_string(columns.size()) + " columns for " +
                               std::to_string(kinds_.size()) + " fields");
    }
    const size_t rows = columns.size() ? nb::len(nb::handle(columns[0])) : 0;
    records_.resize(rows);
    for (size_t r = 0; r < rows; ++r) {
      pack::StreamRecord& rec = records_[r];
      rec.name = file + ": row " + std::to_string(first_row + r);
      nb::int_ key(r);
      if (bad.contains(key)) {
        rec.status = Status::Corruption(rec.name + ": " + nb::cast<std::string>(bad[key]));
        continue;
      }
      rec.fields.resize(kinds_.size());
      for (size_t c = 0; c < kinds_.size(); ++c) {
        nb::handle v = nb::borrow<nb::list>(columns[c])[r];
        std::vector<std::byte>& out = rec.fields[c];
        switch (kinds_[c]) {
          case format::FieldKind::kInt64: {
            const int64_t x = nb::cast<int64_t>(v);
            const auto* p = reinterpret_cast<const std::byte*>(&x);
            out.assign(p, p + sizeof(x));
            break;
          }
          case format::FieldKind::kFloat32: {
            const float x = static_cast<float>(nb::cast<double>(v));
            const auto* p = reinterpret_cast<const std::byte*>(&x);
            out.assign(p, p + sizeof(x));
            break;
          }
          default: {
            const char* data = nullptr;
            Py_ssize_t size = 0;
            if (PyBytes_Check(v.ptr())) {
              data = PyBytes_AS_STRING(v.ptr());
              size = PyBytes_GET_SIZE(v.ptr());
            } else if (PyUnicode_Check(v.ptr())) {
              data = PyUnicode_AsUTF8AndSize(v.ptr(), &size);
              if (data == nullptr) throw nb::python_error();
            } else if (!v.is_none()) {
              throw std::runtime_error(rec.name + ": column " + std::to_string(c) +
                                       " holds neither bytes nor text");
            }
            const auto* p = reinterpret_cast<const std::byte*>(data);
            out.assign(p, p + size);
          }
        }
      }
    }
    ++batches_;
  }

  nb::iterator batches_;
  std::vector<format::FieldKind> kinds_;
  std::vector<pack::StreamRecord> records_;
  size_t pos_ = 0;
  bool done_ = false;
  std::optional<nb::python_error> error_;
};

nb::dict PackStream(const std::vector<std::pair<std::string, std::string>>& fields,
                    const std::vector<std::string>& class_names, const std::string& source,
                    uint64_t records_total, nb::handle batches, const std::string& out,
                    pack::PackOptions options, nb::object progress) {
  pack::StreamSpec spec;
  std::vector<format::FieldKind> kinds;
  for (const auto& [name, kind] : fields) {
    spec.schema.fields.push_back({name, ValueOrThrow(format::ParseFieldKind(kind))});
    kinds.push_back(spec.schema.fields.back().kind);
  }
  spec.class_names = class_names;
  spec.source = source;
  spec.records_total = records_total;
  PyBatchStream stream(nb::iter(batches), kinds);
  PyProgress call(progress, "saturate.pack progress");
  if (!progress.is_none()) {
    options.progress = [&](const pack::PackProgress& p) {
      call(p.items_done, p.items_total, p.bytes_written);
    };
  }
  Result<pack::PackSummary> summary = WithoutGil([&] {
    return pack::PackStream(
        spec, [&](pack::StreamRecord* r) { return stream.Next(r); }, out, options);
  });
  stream.RaiseIfStopped();
  return SummaryDict(ValueOrThrow(std::move(summary)));
}

nb::dict Verify(const std::string& dataset, size_t max_problems, bool use_mmap) {
  format::VerifyOptions options;
  options.max_problems = max_problems;
  options.use_mmap = use_mmap;
  format::VerifyReport r =
      ValueOrThrow(WithoutGil([&] { return format::VerifyDataset(dataset, options); }));
  nb::list problems;
  for (const format::VerifyProblem& p : r.problems) problems.append(p.ToString());
  nb::dict d;
  d["ok"] = r.ok();
  d["records_checked"] = r.records_checked;
  d["bytes_checked"] = r.bytes_checked;
  d["problem_count"] = r.problem_count;
  d["problems"] = problems;
  return d;
}

// saturate.watch: a Watcher over this process, with an optional /metrics endpoint.
class PyWatcher {
 public:
  PyWatcher(const watch::WatchOptions& options, const std::optional<std::string>& prometheus) {
    watcher_ = ValueOrThrow(WithoutGil([&] { return watch::Watcher::Start(options); }));
    if (prometheus) {
      watch::ListenAddress address = ValueOrThrow(watch::ParseListenAddress(*prometheus));
      watch::Watcher* w = watcher_.get();
      server_ =
          ValueOrThrow(watch::MetricsServer::Start(address, [w] { return w->PrometheusText(); }));
    }
  }

  void Stop(std::optional<int> exit_code) {
    server_.reset();
    ThrowIfError(WithoutGil([&] { return watcher_->Stop(exit_code); }));
  }

  const watch::Watcher& watcher() const { return *watcher_; }
  std::optional<std::string> metrics_url() const {
    return server_ ? std::optional<std::string>(server_->url()) : std::nullopt;
  }

 private:
  std::unique_ptr<watch::Watcher> watcher_;
  std::unique_ptr<watch::MetricsServer> server_;
};

Result<trace::Category> ParseCategory(std::string_view name) {
  if (name == "user") return trace::Category::kUser;
  if (name == "loader") return trace::Category::kLoader;
  if (name == "checkpoint") return trace::Category::kCheckpoint;
  return Status::InvalidArgument("trace category '" + std::string(name) +
                                 "' (use user, loader or checkpoint)");
}

// saturate.phase: a span (and NVTX range) from __enter__ to __exit__. Kept in
// C++ so that a span costs two calls and no Python frames.
class PyPhase {
 public:
  PyPhase(std::string name, const std::string& category)
      : name_(std::move(name)),
        category_name_(category),
        category_(ValueOrThrow(ParseCategory(category))) {}

  void Enter() {
    if (phase_) {
      ThrowIfError(Status::InvalidArgument("phase '" + name_ +
                                           "' is already entered; nest a new saturate.phase()"));
    }
    phase_.emplace(name_, category_);  // views name_, which outlives it
  }
  void Exit() { phase_.reset(); }

  const std::string& name() const { return name_; }
  const std::string& category() const { return category_name_; }

 private:
  std::string name_;
  std::string category_name_;
  trace::Category category_;
  std::optional<trace::Phase> phase_;
};

// ---- checkpoint (saturate.Checkpointer, python/saturate/checkpoint.py) ----
// Tensors arrive as (name, data pointer, bytes, dtype, shape, device) tuples:
// the Python layer keeps the tensors alive for the call and the engine
// copies them into its pool with the GIL released, so no Python-side copy.
using TensorTuple =
    std::tuple<std::string, uintptr_t, uint64_t, std::string, std::vector<int64_t>, std::string>;

std::vector<checkpoint::TensorRef> ToRefs(const std::vector<TensorTuple>& tensors) {
  std::vector<checkpoint::TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& [name, ptr, bytes, dtype, shape, device] : tensors) {
    refs.push_back({name, reinterpret_cast<const void*>(ptr), bytes, dtype, shape, device});
  }
  return refs;
}

// A snapshot slot whose device tensors the Python layer fills (D2H copies).
struct PyPendingSave {
  std::unique_ptr<checkpoint::PendingSave> pending;
};

class PyCheckpointer {
 public:
  PyCheckpointer(const std::string& dir, const checkpoint::CheckpointOptions& options)
      : ckpt_(ValueOrThrow(checkpoint::Checkpointer::Open(dir, options))) {}

  bool Save(uint64_t step, const std::vector<TensorTuple>& tensors, const nb::bytes& metadata) {
    std::vector<checkpoint::TensorRef> refs = ToRefs(tensors);
    std::string meta(metadata.c_str(), metadata.size());
    return ValueOrThrow(WithoutGil([&] { return ckpt_->Save(step, refs, meta); }));
  }
  void Prepare(const std::vector<uint64_t>& tensor_bytes) {
    ThrowIfError(WithoutGil([&] { return ckpt_->Prepare(tensor_bytes); }));
  }
  std::optional<PyPendingSave> Begin(uint64_t step, const std::vector<TensorTuple>& tensors) {
    std::vector<checkpoint::TensorRef> refs = ToRefs(tensors);
    auto pending = ValueOrThrow(WithoutGil([&] { return ckpt_->Begin(step, refs); }));
    if (pending->skipped()) return std::nullopt;
    return PyPendingSave{std::move(pending)};
  }
  // `buffer`: a pending save's buffer address (PendingSave.buffer).
  void PinForCuda(uintptr_t buffer, int cuda_device) {
    ThrowIfError(WithoutGil(
        [&] { return ckpt_->PinForCuda(reinterpret_cast<void*>(buffer), cuda_device); }));
  }
  void Commit(PyPendingSave& p, const nb::bytes& metadata) {
    std::string meta(metadata.c_str(), metadata.size());
    ThrowIfError(WithoutGil([&] { return ckpt_->Commit(std::move(p.pending), meta); }));
  }
  void Wait() {
    ThrowIfError(WithoutGil([&] { return ckpt_->Wait(); }));
  }
  bool WaitFor(double timeout_s) {
    return WithoutGil([&] { return ckpt_->WaitFor(static_cast<int64_t>(timeout_s * 1e9)); });
  }
  void Close() {
    ThrowIfError(WithoutGil([&] { return ckpt_->Close(); }));
  }
  nb::dict Stats() const {
    const checkpoint::CheckpointStats s = ckpt_->stats();
    nb::dict d;
    d["saves"] = s.saves;
    d["commits"] = s.commits;
    d["skipped"] = s.skipped;
    d["failed"] = s.failed;
    d["last_blocking_ns"] = s.last_blocking_ns;
    d["total_blocking_ns"] = s.total_blocking_ns;
    d["last_write_ns"] = s.last_write_ns;
    d["last_bytes"] = s.last_bytes;
    d["bytes_written"] = s.bytes_written;
    d["write_bytes_per_s"] = s.write_bytes_per_s;
    d["pool_bytes"] = s.pool_bytes;
    d["pool_allocations"] = s.pool_allocations;
    d["last_committed_step"] = s.has_committed ? nb::cast(s.last_committed_step) : nb::none();
    return d;
  }

 private:
  std::unique_ptr<checkpoint::Checkpointer> ckpt_;
};

nb::dict ManifestDict(const std::string& path, const checkpoint::Manifest& m) {
  nb::list tensors;
  for (const checkpoint::TensorEntry& t : m.tensors) {
    nb::dict d;
    d["name"] = t.name;
    d["dtype"] = t.dtype;
    d["shape"] = t.shape;
    d["device"] = t.device;
    d["file"] = path + "/" + t.file;
    d["offset"] = t.offset;
    d["bytes"] = t.bytes;
    tensors.append(d);
  }
  nb::dict d;
  d["path"] = path;
  d["step"] = m.step;
  d["created_unix_ms"] = m.created_unix_ms;
  d["tensors"] = tensors;
  d["metadata_file"] = path + "/" + m.metadata_file;
  return d;
}

}  // namespace
}  // namespace saturate::python

using namespace saturate;          // NOLINT: the module body names many library types
using namespace saturate::python;  // NOLINT

NB_MODULE(_core, m) {
  m.doc() = "saturate's C++ engine; use the `saturate` package, not this module";

  nb::enum_<Framework>(m, "Framework")
      .value("numpy", Framework::kNumpy)
      .value("torch", Framework::kTorch)
      .value("jax", Framework::kJax)
      .value("dlpack", Framework::kDlpack);

  nb::class_<PyLoader>(m, "Loader")
      .def(
          "__init__",
          [](PyLoader* self, const std::string& dataset, uint64_t batch_size, bool shuffle,
             uint64_t seed, bool drop_last, std::optional<uint32_t> rank,
             std::optional<uint32_t> world_size, bool drop_uneven, int threads, int prefetch,
             uint64_t ram_cap_bytes, int max_held_batches, bool skip_bad,
             const std::vector<std::string>& transforms, const std::string& device,
             int device_prefetch, const std::string& endpoint, const std::string& cache_dir,
             uint64_t cache_bytes, uint64_t readahead_bytes, int remote_requests,
             bool block_shuffle, const std::string& decode, const nb::object& open_progress) {
            feed::LoaderOptions o = MakeLoaderOptions(
                dataset, batch_size, shuffle, seed, drop_last, rank, world_size, drop_uneven,
                threads, prefetch, ram_cap_bytes, max_held_batches, skip_bad, transforms);
            o.remote.endpoint = endpoint;
            o.remote.cache_dir = cache_dir;
            o.remote.cache_bytes = cache_bytes;
            o.remote.readahead_bytes = readahead_bytes;
            o.remote.requests = remote_requests;
            o.block_shuffle = block_shuffle;
            new (self) PyLoader(std::move(o), device, device_prefetch, decode, open_progress);
          },
          "dataset"_a, "batch_size"_a, "shuffle"_a, "seed"_a, "drop_last"_a, "rank"_a.none(),
          "world_size"_a.none(), "drop_uneven"_a, "threads"_a, "prefetch"_a, "ram_cap_bytes"_a,
          "max_held_batches"_a, "skip_bad"_a, "transforms"_a, "device"_a = "cpu",
          "device_prefetch"_a = 2, "endpoint"_a = "", "cache_dir"_a = "", "cache_bytes"_a = 0,
          "readahead_bytes"_a = 0, "remote_requests"_a = 0, "block_shuffle"_a = false,
          "decode"_a = "cpu", "open_progress"_a.none() = nb::none())
      .def("next", &PyLoader::Next, "framework"_a, "with_info"_a = false, "stream"_a = 0)
      .def("set_epoch", &PyLoader::SetEpoch, "epoch"_a)
      .def("state_json", &PyLoader::StateJson)
      .def("restore_json", &PyLoader::RestoreJson, "json"_a)
      .def("stats", [](const PyLoader& l) { return StatsDict(l.Stats()); })
      .def_prop_ro("device_index", &PyLoader::device_index)
      .def_prop_ro("batches_per_epoch",
                   [](const PyLoader& l) { return l.loader().batches_per_epoch(); })
      .def_prop_ro("batch_bytes", [](const PyLoader& l) { return l.loader().batch_bytes(); })
      .def_prop_ro("rank", [](const PyLoader& l) { return l.loader().rank(); })
      .def_prop_ro("world_size", [](const PyLoader& l) { return l.loader().world_size(); })
      .def_prop_ro("class_names", [](const PyLoader& l) { return l.loader().class_names(); });

  const pack::PackOptions defaults;
  nb::class_<pack::PackOptions>(m, "PackOptions")
      .def("__init__", &InitPackOptions, "shard_bytes"_a, "threads"_a, "force"_a,
           "skip_bad"_a = defaults.skip_bad, "reencode_max_side"_a = defaults.reencode_max_side,
           "reencode_quality"_a = defaults.reencode_quality,
           "keep_jpeg_bytes"_a = defaults.keep_jpeg_bytes);
  m.def(
      "pack_folder",
      [](const std::string& root, const std::string& out, const pack::PackOptions& o) {
        return RunPack([&] { return pack::PackImageFolder(root, out, o); });
      },
      "root"_a, "out"_a, "options"_a);
  m.def(
      "pack_table",
      [](const std::string& table, const std::string& path_column, const std::string& label_column,
         const std::string& out, const pack::PackOptions& o) {
        pack::TableSpec spec{path_column, label_column};
        return RunPack([&] { return pack::PackTable(table, spec, out, o); });
      },
      "table"_a, "path_column"_a, "label_column"_a, "out"_a, "options"_a);
  m.def(
      "pack_source",
      [](const std::vector<std::string>& sources, const std::string& image_key,
         const std::string& label_key, const std::string& out, pack::PackOptions o,
         const std::string& endpoint) {
        formats::SourceOptions so;
        so.image_key = image_key;
        so.label_key = label_key;
        o.endpoint = endpoint;
        return RunPack([&] { return pack::PackSource(sources, so, out, o); });
      },
      "sources"_a, "image_key"_a, "label_key"_a, "out"_a, "options"_a, "endpoint"_a = "");
  m.def("is_source_pattern", &formats::IsSourcePattern, "path"_a);
  m.def(
      "upload_dataset",
      [](const std::string& local, const std::string& url, bool overwrite,
         const std::string& endpoint, uint64_t multipart_bytes) {
        ThrowIfError(WithoutGil([&] {
          return remote::UploadDataset(local, url, overwrite,
                                       remote::UploadStoreOptions(endpoint, multipart_bytes));
        }));
      },
      "local"_a, "url"_a, "overwrite"_a, "endpoint"_a, "multipart_bytes"_a);
  m.def(
      "pack_stream",
      [](const std::vector<std::pair<std::string, std::string>>& fields,
         const std::vector<std::string>& class_names, const std::string& source,
         uint64_t records_total, nb::handle batches, const std::string& out,
         const pack::PackOptions& o, nb::object progress) {
        return PackStream(fields, class_names, source, records_total, batches, out, o, progress);
      },
      "fields"_a, "class_names"_a, "source"_a, "records_total"_a, "batches"_a, "out"_a, "options"_a,
      "progress"_a.none() = nb::none());
  m.def(
      "pack_hdf5",
      [](const std::vector<std::string>& files, const std::string& image_key,
         const std::string& label_key, const std::string& out, const pack::PackOptions& o) {
        pack::Hdf5Spec spec{files, image_key, label_key};
        return RunPack([&] { return pack::PackHdf5(spec, out, o); });
      },
      "files"_a, "image_key"_a, "label_key"_a, "out"_a, "options"_a);
  m.def(
      "pack_idx",
      [](const std::string& images, const std::string& labels,
         const std::vector<std::string>& class_names, const std::string& out,
         const pack::PackOptions& o) {
        pack::IdxSpec spec{images, labels, class_names};
        return RunPack([&] { return pack::PackIdx(spec, out, o); });
      },
      "images"_a, "labels"_a, "class_names"_a, "out"_a, "options"_a);
  m.def("verify", &Verify, "dataset"_a, "max_problems"_a, "use_mmap"_a);

  nb::class_<PyWatcher>(m, "Watcher")
      .def(
          "__init__",
          [](PyWatcher* self, const std::string& run_dir, int64_t interval_ns, int pid,
             const std::vector<std::string>& command, bool gpus, const std::string& nvml_library,
             const std::optional<std::string>& prometheus) {
            watch::WatchOptions o;
            o.run_dir = run_dir;
            o.interval_ns = interval_ns;
            o.pid = pid;
            o.command = command;
            o.gpus = gpus;
            o.nvml_library = nvml_library;
            // Job labels (job_id, user, ...) as `saturate watch` puts them on its series.
            watch::JobLabels job =
                watch::JobLabelsFromEnv([](const char* n) { return std::getenv(n); });
            o.job_labels = std::move(job.labels);
            o.job_gpus = std::move(job.gpus);
            new (self) PyWatcher(o, prometheus);
          },
          "run_dir"_a, "interval_ns"_a, "pid"_a, "command"_a, "gpus"_a, "nvml_library"_a,
          "prometheus"_a.none())
      .def("stop", &PyWatcher::Stop, "exit_code"_a.none())
      .def_prop_ro("gpu_status", [](const PyWatcher& w) { return w.watcher().gpu_status(); })
      .def_prop_ro("metrics_url", &PyWatcher::metrics_url)
      .def("latest_json", [](const PyWatcher& w) { return w.watcher().LatestJson(); })
      .def("prometheus_text", [](const PyWatcher& w) { return w.watcher().PrometheusText(); })
      .def(
          "render", [](const PyWatcher& w, bool screen) { return w.watcher().Render(screen); },
          "screen"_a)
      .def("stats", [](const PyWatcher& w) {
        const watch::WatchStats s = w.watcher().stats();
        nb::dict d;
        d["samples"] = s.samples;
        d["elapsed_ns"] = s.elapsed_ns;
        d["sampler_cpu_ns"] = s.sampler_cpu_ns;
        d["last_error"] = s.last_error;
        return d;
      });

  // ---- trace (saturate.phase, saturate.step, saturate.trace) ----
  nb::class_<PyPhase>(m, "Phase",
                      "A span from entering to leaving (and an NVTX range with CUDA): "
                      "`with saturate.phase(\"forward\"):` or `@saturate.phase(\"forward\")`.")
      .def(nb::init<std::string, const std::string&>(), "name"_a, "category"_a = "user")
      .def("__enter__",
           [](nb::handle self) {
             nb::cast<PyPhase&>(self).Enter();
             return nb::borrow(self);
           })
      .def(
          "__exit__", [](PyPhase& p, nb::handle, nb::handle, nb::handle) { p.Exit(); },
          "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
      .def("__call__",
           [](const PyPhase& p, nb::object fn) {
             return nb::module_::import_("saturate._trace")
                 .attr("_wrap")(p.name(), p.category(), fn);
           })
      .def_prop_ro("name", &PyPhase::name)
      .def_prop_ro("category", &PyPhase::category);
  m.def("trace_step", [] { return trace::Step(); });
  m.def(
      "trace_start",
      [](const std::string& run_dir) {
        ThrowIfError(WithoutGil([&] { return trace::Start(run_dir); }));
      },
      "run_dir"_a);
  m.def("trace_stop", [] { ThrowIfError(WithoutGil([] { return trace::Stop(); })); });
  m.def("trace_flush", [] { ThrowIfError(WithoutGil([] { return trace::Flush(); })); });
  m.def("trace_enabled", [] { return trace::Enabled(); });
  m.def("trace_run_dir", [] { return trace::RunDir(); });
  m.def("trace_now_ns", [] { return trace::NowNs(); });

  // ---- checkpoint ----
  nb::class_<PyPendingSave>(m, "PendingSave")
      .def("destination",
           [](const PyPendingSave& p, size_t i) {
             return reinterpret_cast<uintptr_t>(p.pending->destination(i));
           })
      .def_prop_ro(
          "buffer",
          [](const PyPendingSave& p) { return reinterpret_cast<uintptr_t>(p.pending->buffer()); })
      .def_prop_ro("buffer_bytes",
                   [](const PyPendingSave& p) { return p.pending->buffer_bytes(); });
  nb::class_<PyCheckpointer>(m, "Checkpointer")
      .def(
          "__init__",
          [](PyCheckpointer* self, const std::string& dir, int keep, int max_in_flight,
             const std::string& on_busy, int copy_threads, const std::string& endpoint,
             uint64_t multipart_threshold_bytes, uint64_t part_bytes) {
            checkpoint::CheckpointOptions o;
            o.keep = keep;
            o.max_in_flight = max_in_flight;
            if (on_busy != "wait" && on_busy != "skip") {
              ThrowIfError(Status::InvalidArgument("on_busy must be 'wait' or 'skip', got '" +
                                                   on_busy + "'"));
            }
            o.on_busy = on_busy == "skip" ? checkpoint::OnBusy::kSkip : checkpoint::OnBusy::kWait;
            o.copy_threads = copy_threads;
            o.remote.endpoint = endpoint;  // s3:// dirs; 0 below: the store's defaults
            if (multipart_threshold_bytes > 0) {
              o.remote.multipart_threshold_bytes = multipart_threshold_bytes;
            }
            if (part_bytes > 0) o.remote.part_bytes = part_bytes;
            new (self) PyCheckpointer(dir, o);
          },
          "dir"_a, "keep"_a, "max_in_flight"_a, "on_busy"_a, "copy_threads"_a, "endpoint"_a = "",
          "multipart_threshold_bytes"_a = 0, "part_bytes"_a = 0)
      .def("save", &PyCheckpointer::Save, "step"_a, "tensors"_a, "metadata"_a)
      .def("prepare", &PyCheckpointer::Prepare, "tensor_bytes"_a)
      .def("begin", &PyCheckpointer::Begin, "step"_a, "tensors"_a, nb::keep_alive<0, 1>())
      .def("commit", &PyCheckpointer::Commit, "pending"_a, "metadata"_a)
      .def("pin_for_cuda", &PyCheckpointer::PinForCuda, "buffer"_a, "cuda_device"_a)
      .def("wait", &PyCheckpointer::Wait)
      .def("wait_for", &PyCheckpointer::WaitFor, "timeout_s"_a)
      .def("close", &PyCheckpointer::Close)
      .def("stats", &PyCheckpointer::Stats);
  m.def(
      "checkpoint_load_newest",
      [](const std::string& dir) {
        checkpoint::LoadResult r =
            ValueOrThrow(WithoutGil([&] { return checkpoint::LoadNewest(dir); }));
        nb::dict d = r.found ? ManifestDict(r.path, r.manifest) : nb::dict();
        d["found"] = r.found;
        d["warnings"] = r.warnings;
        return d;
      },
      "dir"_a);
  m.def(
      "checkpoint_verify",
      [](const std::string& path) {
        checkpoint::Manifest mf =
            ValueOrThrow(WithoutGil([&] { return checkpoint::Verify(path); }));
        return ManifestDict(path, mf);
      },
      "path"_a);
  m.def(
      "checkpoint_list",
      [](const std::string& dir) {
        auto all = ValueOrThrow(checkpoint::List(dir));
        std::vector<std::tuple<uint64_t, std::string>> out;
        for (const auto& c : all) out.emplace_back(c.step, c.path);
        return out;
      },
      "dir"_a);
  m.def("young_interval_s", &checkpoint::YoungIntervalSeconds, "cost_s"_a, "mtbf_s"_a);
  BindRemote(m);  // core_remote.cc: ObjectStore, s3:// checkpoint helpers
}
