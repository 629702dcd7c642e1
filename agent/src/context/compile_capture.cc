#include "agent/src/context/compile_capture.h"

#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <utility>

namespace castscope {

bool compile_tracing_now() noexcept { return compile_tracing_now(c10::impl::tls_local_dispatch_key_set()); }

bool compile_tracing_now(const c10::impl::LocalDispatchKeySet& keys) noexcept {
  using c10::impl::TorchDispatchModeTLS;
  // TorchDispatchModeTLS includes the Python key whenever its stack or an
  // infra mode (FakeTensor's) is set and removes it when the last one goes.
  if (!keys.included_.has(c10::DispatchKey::Python)) return false;  // the common case: no mode's state read
  if (!TorchDispatchModeTLS::any_modes_set()) return false;
  return TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::FAKE).has_value();
}

uint64_t compile_record_key(const Record& op) {
  uint64_t key = (uint64_t{op.op.location} << 32) ^ op.op_id;
  auto mix = [&key](uint64_t v) { key = (key ^ v) * 0x100000001b3ULL; };
  mix(static_cast<uint64_t>(op.op.phase));
  mix(static_cast<uint64_t>(op.op.autocast_dtype));
  for (uint8_t i = 0; i < op.op.num_inputs; ++i) mix(static_cast<uint64_t>(op.op.input_dtypes[i]) + 16 * (i + 1));
  return key;
}

namespace {
thread_local bool t_collecting = false;
}

void CompileCapture::new_epoch() {
  std::lock_guard<std::mutex> lock(mutex_);
  keys_.clear();
}

bool CompileCapture::first_in_epoch(uint64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (keys_.size() >= kMaxKeys) return !keys_.count(key);
  return keys_.insert(key).second;
}

void CompileCapture::set_collecting(bool on) noexcept { t_collecting = on; }

bool CompileCapture::collecting() noexcept { return t_collecting; }

bool CompileCapture::keep(const CompileDecision& decision) { return decisions_.push(decision); }

std::vector<CompileDecision> CompileCapture::take() { return decisions_.take(); }

bool CompileCapture::keep_logged(const Record& record) { return logged_.push(record); }

std::vector<Record> CompileCapture::take_logged() { return logged_.take(); }

}  // namespace castscope
