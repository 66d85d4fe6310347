// saturate._core, object-storage part: the ObjectStore (s3:// checkpoints,
// python/saturate/checkpoint.py and dist_checkpoint.py) and the checkpoint
// format helpers the Python layer needs to read a checkpoint it downloaded;
// and checkpoint_span, the DistCheckpointer's spans with the save they belong
// to (doctor matches a save's spans across ranks by them).
//
// Every call that does I/O or hashes releases the GIL. Errors become
// saturate.errors exceptions through core_util.h's ThrowIfError.
// Thread-safety: an ObjectStore may be used from any number of Python
// threads at once (the C++ store allows it).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "core_util.h"
#include "saturate/base/status.h"
#include "saturate/remote/object_store.h"
#include "saturate/remote/objects.h"
#include "saturate/remote/url.h"
#include "saturate/trace/trace.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace saturate::python {
namespace {

using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using ConstBytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

class PyObjectStore {
 public:
  PyObjectStore(const std::string& url, const remote::StoreOptions& options) {
    remote::ObjectUrl parsed = ValueOrThrow(remote::ParseObjectUrl(url));
    store_ = ValueOrThrow(remote::OpenObjectStore(parsed, options));
  }
  nb::bytes Get(const std::string& name) {
    std::string data;
    {
      nb::gil_scoped_release release;
      auto r = store_->Get(name);
      if (!r.ok()) {
        nb::gil_scoped_acquire gil;
        ThrowIfError(r.status());
      }
      data = std::move(*r);
    }
    return nb::bytes(data.data(), data.size());
  }
  void GetInto(const std::string& name, uint64_t offset, Bytes out, int requests,
               uint64_t part_bytes) {
    std::span<std::byte> span(reinterpret_cast<std::byte*>(out.data()), out.shape(0));
    Status s;
    {
      nb::gil_scoped_release release;
      s = remote::FetchInto(*store_, name, offset, span,
                            {.requests = requests, .part_bytes = part_bytes});
    }
    ThrowIfError(s);
  }
  void Put(const std::string& name, const nb::bytes& data) {
    std::span<const std::byte> span(reinterpret_cast<const std::byte*>(data.c_str()), data.size());
    Status s;
    {
      nb::gil_scoped_release release;
      s = store_->Put(name, span);
    }
    ThrowIfError(s);
  }
  void Delete(const std::string& name) {
    Status s;
    {
      nb::gil_scoped_release release;
      s = store_->Delete(name);
    }
    ThrowIfError(s);
  }
  std::vector<std::string> List() {
    Result<std::vector<std::string>> r = Status::OK();
    {
      nb::gil_scoped_release release;
      r = store_->List();
    }
    return ValueOrThrow(std::move(r));
  }
  std::string Describe(const std::string& name) const { return store_->Describe(name); }
  nb::dict Stats() const {
    remote::RemoteStats s = store_->stats();
    nb::dict d;
    d["requests"] = s.requests;
    d["bytes_fetched"] = s.bytes_fetched;
    d["bytes_uploaded"] = s.bytes_uploaded;
    d["retries"] = s.retries;
    d["errors"] = s.errors;
    d["request_ns"] = s.request_ns;
    return d;
  }

 private:
  std::unique_ptr<remote::ObjectStore> store_;
};

}  // namespace

// Called from core.cc's NB_MODULE.
void BindRemote(nb::module_& m) {
  nb::class_<PyObjectStore>(m, "ObjectStore")
      .def(
          "__init__",
          [](PyObjectStore* self, const std::string& url, const std::string& endpoint,
             uint64_t multipart_threshold_bytes, uint64_t part_bytes) {
            remote::StoreOptions o;
            o.endpoint = endpoint;
            if (multipart_threshold_bytes > 0)
              o.multipart_threshold_bytes = multipart_threshold_bytes;
            if (part_bytes > 0) o.part_bytes = part_bytes;
            new (self) PyObjectStore(url, o);
          },
          "url"_a, "endpoint"_a = "", "multipart_threshold_bytes"_a = 0, "part_bytes"_a = 0)
      .def("get", &PyObjectStore::Get, "name"_a)
      .def("get_into", &PyObjectStore::GetInto, "name"_a, "offset"_a, "out"_a, "requests"_a = 4,
           "part_bytes"_a = uint64_t{16} << 20)
      .def("put", &PyObjectStore::Put, "name"_a, "data"_a)
      .def("delete", &PyObjectStore::Delete, "name"_a)
      .def("list", &PyObjectStore::List)
      .def("describe", &PyObjectStore::Describe, "name"_a)
      .def("stats", &PyObjectStore::Stats);
  // A `checkpoint` span with {"step", "seq"} (and {"rank"} when rank >= 0:
  // the rank a coordinator span waited for).
  m.def(
      "checkpoint_span",
      [](const std::string& name, int64_t start_ns, int64_t end_ns, int64_t step, int64_t seq,
         int64_t rank) {
        if (rank >= 0) {
          trace::RecordSpan(name, start_ns, end_ns, trace::Category::kCheckpoint,
                            {{"step", step}, {"seq", seq}, {"rank", rank}});
        } else {
          trace::RecordSpan(name, start_ns, end_ns, trace::Category::kCheckpoint,
                            {{"step", step}, {"seq", seq}});
        }
      },
      "name"_a, "start_ns"_a, "end_ns"_a, "step"_a, "seq"_a, "rank"_a = -1);
  m.def(
      "is_remote_url", [](const std::string& path) { return remote::IsRemoteUrl(path); }, "path"_a);
  m.def(
      "xxh3_hex",
      [](ConstBytes data) {
        std::span<const std::byte> span(reinterpret_cast<const std::byte*>(data.data()),
                                        data.shape(0));
        nb::gil_scoped_release release;
        return checkpoint::HexChecksum(checkpoint::Checksum(span));
      },
      "data"_a);
  // A single-process checkpoint's manifest.json, checked (format, its own
  // checksum, tensor bounds): {"step", "created_unix_ms", "metadata_file",
  // "files": [{name, bytes, xxh3}], "tensors": [{name, dtype, shape, device,
  // file, offset, bytes}]} with names relative to the checkpoint.
  m.def(
      "checkpoint_parse_manifest",
      [](const nb::bytes& text, const std::string& source) {
        checkpoint::Manifest mf = ValueOrThrow(
            checkpoint::ParseManifest(std::string_view(text.c_str(), text.size()), source));
        nb::list files;
        for (const checkpoint::FileEntry& f : mf.files) {
          nb::dict d;
          d["name"] = f.name;
          d["bytes"] = f.bytes;
          d["xxh3"] = checkpoint::HexChecksum(f.xxh3);
          files.append(d);
        }
        nb::list tensors;
        for (const checkpoint::TensorEntry& t : mf.tensors) {
          nb::dict d;
          d["name"] = t.name;
          d["dtype"] = t.dtype;
          d["shape"] = t.shape;
          d["device"] = t.device;
          d["file"] = t.file;
          d["offset"] = t.offset;
          d["bytes"] = t.bytes;
          tensors.append(d);
        }
        nb::dict d;
        d["step"] = mf.step;
        d["created_unix_ms"] = mf.created_unix_ms;
        d["metadata_file"] = mf.metadata_file;
        d["files"] = files;
        d["tensors"] = tensors;
        return d;
      },
      "text"_a, "source"_a);
}

}  // namespace saturate::python
