// ParseFieldOptions: the text form of per-field transforms (see loader.h).
#include <charconv>
#include <cstdlib>

#include "saturate/feed/loader.h"

namespace saturate::feed {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

Result<double> ParseNumber(std::string_view key, std::string_view text) {
  std::string copy(text);
  char* end = nullptr;
  double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) {
    return Status::InvalidArgument("option '" + std::string(key) + "': '" + copy +
                                   "' is not a number");
  }
  return v;
}

Result<int64_t> ParseInt(std::string_view key, std::string_view text) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return Status::InvalidArgument("option '" + std::string(key) + "': '" + std::string(text) +
                                   "' is not an integer");
  }
  return v;
}

// "MIN..MAX"
Status ParseRange(std::string_view key, std::string_view text, double* lo, double* hi) {
  size_t dots = text.find("..");
  if (dots == std::string_view::npos) {
    return Status::InvalidArgument("option '" + std::string(key) + "' wants MIN..MAX");
  }
  SATURATE_ASSIGN_OR_RETURN(*lo, ParseNumber(key, text.substr(0, dots)));
  SATURATE_ASSIGN_OR_RETURN(*hi, ParseNumber(key, text.substr(dots + 2)));
  return Status::OK();
}

// "R/G/B" for images or a single value for arrays.
Status ParseChannels(std::string_view key, std::string_view text, std::array<float, 3>* image,
                     float* array) {
  auto parts = Split(text, '/');
  if (parts.size() == 1) {
    SATURATE_ASSIGN_OR_RETURN(double v, ParseNumber(key, parts[0]));
    *array = static_cast<float>(v);
    image->fill(static_cast<float>(v));
    return Status::OK();
  }
  if (parts.size() != 3) {
    return Status::InvalidArgument("option '" + std::string(key) + "' wants V or R/G/B");
  }
  for (int c = 0; c < 3; ++c) {
    SATURATE_ASSIGN_OR_RETURN(double v, ParseNumber(key, parts[c]));
    (*image)[c] = static_cast<float>(v);
  }
  return Status::OK();
}

Result<DType> ParseOutputDType(std::string_view text) {
  if (text == "uint8") return DType::kUInt8;
  if (text == "float32") return DType::kFloat32;
  if (text == "float16") return DType::kFloat16;
  if (text == "bfloat16") return DType::kBFloat16;
  return Status::InvalidArgument("option 'dtype': '" + std::string(text) +
                                 "' (use uint8, float32, float16 or bfloat16)");
}

Status ApplyOption(std::string_view key, std::string_view value, bool has_value, FieldOptions* f) {
  ImageTransform& img = f->image;
  auto need_value = [&]() -> Status {
    if (has_value) return Status::OK();
    return Status::InvalidArgument("option '" + std::string(key) + "' needs a value");
  };
  if (key == "crop") {
    SATURATE_RETURN_IF_ERROR(need_value());
    if (value == "random") {
      img.crop = ImageTransform::Crop::kRandomResized;
    } else if (value == "center") {
      img.crop = ImageTransform::Crop::kCenter;
    } else {
      return Status::InvalidArgument("option 'crop': '" + std::string(value) +
                                     "' (use random or center)");
    }
  } else if (key == "size") {
    SATURATE_RETURN_IF_ERROR(need_value());
    auto hw = Split(value, 'x');
    if (hw.size() > 2) return Status::InvalidArgument("option 'size' wants N or HxW");
    SATURATE_ASSIGN_OR_RETURN(int64_t h, ParseInt(key, hw[0]));
    SATURATE_ASSIGN_OR_RETURN(int64_t w,
                              hw.size() == 2 ? ParseInt(key, hw[1]) : Result<int64_t>(h));
    if (h <= 0 || w <= 0 || h > 65535 || w > 65535) {
      return Status::InvalidArgument("option 'size' out of range");
    }
    img.height = static_cast<int>(h);
    img.width = static_cast<int>(w);
  } else if (key == "resize") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_ASSIGN_OR_RETURN(int64_t r, ParseInt(key, value));
    if (r <= 0 || r > 65535) return Status::InvalidArgument("option 'resize' out of range");
    img.resize_shorter = static_cast<int>(r);
  } else if (key == "area") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_RETURN_IF_ERROR(ParseRange(key, value, &img.scale_min, &img.scale_max));
  } else if (key == "ratio") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_RETURN_IF_ERROR(ParseRange(key, value, &img.ratio_min, &img.ratio_max));
  } else if (key == "flip") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_ASSIGN_OR_RETURN(img.flip_prob, ParseNumber(key, value));
    if (img.flip_prob < 0 || img.flip_prob > 1) {
      return Status::InvalidArgument("option 'flip' must be in [0, 1]");
    }
  } else if (key == "dtype") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_ASSIGN_OR_RETURN(DType d, ParseOutputDType(value));
    img.dtype = d;
    f->array.dtype = d;
  } else if (key == "normalize") {
    img.normalize = true;  // ImageNet mean/std unless mean=/std= say otherwise
  } else if (key == "mean" || key == "std") {
    SATURATE_RETURN_IF_ERROR(need_value());
    img.normalize = true;
    SATURATE_RETURN_IF_ERROR(ParseChannels(key, value, key == "mean" ? &img.mean : &img.std,
                                           key == "mean" ? &f->array.mean : &f->array.std));
  } else if (key == "layout") {
    SATURATE_RETURN_IF_ERROR(need_value());
    if (value == "chw") {
      img.layout = Layout::kCHW;
    } else if (value == "hwc") {
      img.layout = Layout::kHWC;
    } else if (value == "channels_last") {
      img.layout = Layout::kChannelsLast;
    } else {
      return Status::InvalidArgument("option 'layout': use chw, hwc or channels_last");
    }
  } else if (key == "to-float") {
    f->array.to_float = true;
  } else if (key == "scale") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_ASSIGN_OR_RETURN(double v, ParseNumber(key, value));
    f->array.scale = static_cast<float>(v);
  } else if (key == "max-length") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_ASSIGN_OR_RETURN(int64_t n, ParseInt(key, value));
    if (n <= 0) return Status::InvalidArgument("option 'max-length' must be positive");
    f->var_array.max_length = static_cast<uint64_t>(n);
  } else if (key == "truncate") {
    f->var_array.truncate = true;
  } else if (key == "pad") {
    SATURATE_RETURN_IF_ERROR(need_value());
    SATURATE_ASSIGN_OR_RETURN(f->var_array.pad_value, ParseInt(key, value));
  } else {
    return Status::InvalidArgument("unknown option '" + std::string(key) + "'");
  }
  return Status::OK();
}

}  // namespace

Result<FieldOptions> ParseFieldOptions(std::string_view spec) {
  size_t colon = spec.find(':');
  if (colon == 0 || colon == std::string_view::npos) {
    return Status::InvalidArgument("transform '" + std::string(spec) +
                                   "': expected FIELD:OPTION,...");
  }
  FieldOptions f;
  f.field = std::string(spec.substr(0, colon));
  for (std::string_view opt : Split(spec.substr(colon + 1), ',')) {
    if (opt.empty()) continue;
    size_t eq = opt.find('=');
    std::string_view key = opt.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? "" : opt.substr(eq + 1);
    Status s = ApplyOption(key, value, eq != std::string_view::npos, &f);
    if (!s.ok()) return s.WithContext("transform '" + std::string(spec) + "'");
  }
  return f;
}

}  // namespace saturate::feed
