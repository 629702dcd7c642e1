// The autocast devices castscope registers on: policy device name, wire
// enum, c10 device type and dispatch key, in one table.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/DispatchKey.h>

#include <string_view>

#include "agent/src/record/cast_record.h"

namespace castscope {

struct AutocastDevice {
  const char* name;
  DeviceKind kind;
  c10::DeviceType device;
  c10::DispatchKey key;
};

inline constexpr AutocastDevice kAutocastDevices[] = {
    {"cpu", DeviceKind::kCpu, c10::DeviceType::CPU, c10::DispatchKey::AutocastCPU},
    {"cuda", DeviceKind::kCuda, c10::DeviceType::CUDA, c10::DispatchKey::AutocastCUDA},
    {"xpu", DeviceKind::kXpu, c10::DeviceType::XPU, c10::DispatchKey::AutocastXPU},
    {"mps", DeviceKind::kMps, c10::DeviceType::MPS, c10::DispatchKey::AutocastMPS},
};

inline const AutocastDevice* find_autocast_device(std::string_view name) {
  for (const auto& d : kAutocastDevices)
    if (name == d.name) return &d;
  return nullptr;
}

inline const AutocastDevice* find_autocast_device(DeviceKind kind) {
  for (const auto& d : kAutocastDevices)
    if (kind == d.kind) return &d;
  return nullptr;
}

}  // namespace castscope
