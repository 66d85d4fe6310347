#include "remote/retry.h"

#include <algorithm>

namespace saturate::remote {

bool ShouldRetry(Transport transport, long http_status) {
  switch (transport) {
    case Transport::kTransient:
      return true;
    case Transport::kPermanent:
      return false;
    case Transport::kOk:
      break;
  }
  return http_status >= 500 || http_status == 408 || http_status == 429;
}

uint64_t BackoffDelayNs(const RetryOptions& o, int retry, uint64_t random) {
  uint64_t d = o.base_delay_ns;
  for (int i = 0; i < retry && d < o.max_delay_ns; ++i) d *= 2;
  d = std::min(d, o.max_delay_ns);
  return d / 2 + random % (d / 2 + 1);
}

bool MayRetry(const RetryOptions& o, int attempts_done, uint64_t elapsed_ns,
              uint64_t next_delay_ns) {
  return attempts_done < o.max_attempts && elapsed_ns + next_delay_ns <= o.deadline_ns;
}

}  // namespace saturate::remote
