// The hot path's record enums (agent/src/record/cast_record.h and
// location_table.h) hold the schema's enum values, so the encoder writes them
// without a table. This file pins that at compile time against the generated
// wire header: a value renumbered or added in the .proto without the record
// enum following fails the build here (the `<Enum>_MAX` checks catch a value
// added at the end). Kept out of agent/src/record so the record library stays
// free of generated headers.
#pragma once

#include <cstdint>

#include "agent/src/record/cast_record.h"
#include "agent/src/record/location_table.h"
#include "castscope/v1/events.wire.h"

namespace castscope::schema_check {

template <typename RecordEnum, typename WireEnum>
constexpr bool same(RecordEnum record, WireEnum wire) {
  return static_cast<int64_t>(record) == static_cast<int64_t>(wire);
}

namespace pb = v1::wire;

static_assert(same(CastPolicy::kUnspecified, pb::CAST_POLICY_UNSPECIFIED));
static_assert(same(CastPolicy::kLowerPrecisionFp, pb::CAST_POLICY_LOWER_PRECISION_FP));
static_assert(same(CastPolicy::kFp32, pb::CAST_POLICY_FP32));
static_assert(same(CastPolicy::kFp32SetOptDtype, pb::CAST_POLICY_FP32_SET_OPT_DTYPE));
static_assert(same(CastPolicy::kFp32AppendDtype, pb::CAST_POLICY_FP32_APPEND_DTYPE));
static_assert(same(CastPolicy::kPromote, pb::CAST_POLICY_PROMOTE));
static_assert(same(CastPolicy::kBanned, pb::CAST_POLICY_BANNED));
static_assert(same(CastPolicy::kBanned, pb::CastPolicy_MAX));
// kKeepNative is no wire value (the native kernel stays); it must not alias one.
static_assert(pb::CastPolicy_Name(static_cast<pb::CastPolicy>(CastPolicy::kKeepNative)).empty());

static_assert(same(GemmCompute::kUnspecified, pb::GEMM_COMPUTE_UNSPECIFIED));
static_assert(same(GemmCompute::k16F, pb::GEMM_COMPUTE_16F));
static_assert(same(GemmCompute::k32F, pb::GEMM_COMPUTE_32F));
static_assert(same(GemmCompute::k32FFast16F, pb::GEMM_COMPUTE_32F_FAST_16F));
static_assert(same(GemmCompute::k32FFast16BF, pb::GEMM_COMPUTE_32F_FAST_16BF));
static_assert(same(GemmCompute::k32FFastTF32, pb::GEMM_COMPUTE_32F_FAST_TF32));
static_assert(same(GemmCompute::k64F, pb::GEMM_COMPUTE_64F));
static_assert(same(GemmCompute::k32I, pb::GEMM_COMPUTE_32I));
static_assert(same(GemmCompute::kOther, pb::GEMM_COMPUTE_OTHER));
static_assert(same(GemmCompute::kOther, pb::GemmCompute_MAX));

static_assert(same(DType::kUnspecified, pb::DTYPE_UNSPECIFIED));
static_assert(same(DType::kFloat32, pb::DTYPE_FLOAT32));
static_assert(same(DType::kFloat16, pb::DTYPE_FLOAT16));
static_assert(same(DType::kBFloat16, pb::DTYPE_BFLOAT16));
static_assert(same(DType::kFloat64, pb::DTYPE_FLOAT64));
static_assert(same(DType::kInt64, pb::DTYPE_INT64));
static_assert(same(DType::kInt32, pb::DTYPE_INT32));
static_assert(same(DType::kInt16, pb::DTYPE_INT16));
static_assert(same(DType::kInt8, pb::DTYPE_INT8));
static_assert(same(DType::kUInt8, pb::DTYPE_UINT8));
static_assert(same(DType::kBool, pb::DTYPE_BOOL));
static_assert(same(DType::kComplex64, pb::DTYPE_COMPLEX64));
static_assert(same(DType::kComplex128, pb::DTYPE_COMPLEX128));
static_assert(same(DType::kFloat8, pb::DTYPE_FLOAT8));
static_assert(same(DType::kOther, pb::DTYPE_OTHER));
static_assert(same(DType::kOther, pb::DType_MAX));

static_assert(same(DeviceKind::kUnspecified, pb::DEVICE_TYPE_UNSPECIFIED));
static_assert(same(DeviceKind::kCpu, pb::DEVICE_TYPE_CPU));
static_assert(same(DeviceKind::kCuda, pb::DEVICE_TYPE_CUDA));
static_assert(same(DeviceKind::kXpu, pb::DEVICE_TYPE_XPU));
static_assert(same(DeviceKind::kMps, pb::DEVICE_TYPE_MPS));
static_assert(same(DeviceKind::kMps, pb::DeviceType_MAX));
// OpFields::autocast_enabled holds one bit per device type in a uint8_t.
static_assert(pb::DeviceType_MAX < 8);

static_assert(same(CastOutcome::kUnspecified, pb::CAST_OUTCOME_UNSPECIFIED));
static_assert(same(CastOutcome::kCast, pb::CAST_OUTCOME_CAST));
static_assert(same(CastOutcome::kAlreadyTarget, pb::CAST_OUTCOME_ALREADY_TARGET));
static_assert(same(CastOutcome::kFloat64, pb::CAST_OUTCOME_FLOAT64));
static_assert(same(CastOutcome::kNotFloating, pb::CAST_OUTCOME_NOT_FLOATING));
static_assert(same(CastOutcome::kOtherDevice, pb::CAST_OUTCOME_OTHER_DEVICE));
static_assert(same(CastOutcome::kDtypeArgSet, pb::CAST_OUTCOME_DTYPE_ARG_SET));
static_assert(same(CastOutcome::kDtypeArgKept, pb::CAST_OUTCOME_DTYPE_ARG_KEPT));
static_assert(same(CastOutcome::kDtypeArgKept, pb::CastOutcome_MAX));

static_assert(same(Role::kUnspecified, pb::ROLE_UNSPECIFIED));
static_assert(same(Role::kWeight, pb::ROLE_WEIGHT));
static_assert(same(Role::kInput, pb::ROLE_INPUT));
static_assert(same(Role::kActivation, pb::ROLE_ACTIVATION));
static_assert(same(Role::kActivation, pb::Role_MAX));

static_assert(same(CacheOutcome::kUnspecified, pb::CACHE_OUTCOME_UNSPECIFIED));
static_assert(same(CacheOutcome::kNotCacheable, pb::CACHE_OUTCOME_NOT_CACHEABLE));
static_assert(same(CacheOutcome::kMiss, pb::CACHE_OUTCOME_MISS));
static_assert(same(CacheOutcome::kHit, pb::CACHE_OUTCOME_HIT));
static_assert(same(CacheOutcome::kStaleHit, pb::CACHE_OUTCOME_STALE_HIT));
static_assert(same(CacheOutcome::kStaleHit, pb::CacheOutcome_MAX));

static_assert(same(ExecutionMode::kUnspecified, pb::EXECUTION_MODE_UNSPECIFIED));
static_assert(same(ExecutionMode::kEager, pb::EXECUTION_MODE_EAGER));
static_assert(same(ExecutionMode::kScript, pb::EXECUTION_MODE_SCRIPT));
static_assert(same(ExecutionMode::kTraceRecording, pb::EXECUTION_MODE_TRACE_RECORDING));
static_assert(same(ExecutionMode::kTraced, pb::EXECUTION_MODE_TRACED));
static_assert(same(ExecutionMode::kScriptWhileTracing, pb::EXECUTION_MODE_SCRIPT_WHILE_TRACING));
static_assert(same(ExecutionMode::kCompiling, pb::EXECUTION_MODE_COMPILING));
static_assert(same(ExecutionMode::kCompiled, pb::EXECUTION_MODE_COMPILED));
static_assert(same(ExecutionMode::kCompiled, pb::ExecutionMode_MAX));

static_assert(same(Phase::kUnspecified, pb::PHASE_UNSPECIFIED));
static_assert(same(Phase::kForward, pb::PHASE_FORWARD));
static_assert(same(Phase::kBackward, pb::PHASE_BACKWARD));
static_assert(same(Phase::kBackward, pb::Phase_MAX));

static_assert(same(SampleTrigger::kUnspecified, pb::CacheSample::TRIGGER_UNSPECIFIED));
static_assert(same(SampleTrigger::kIteration, pb::CacheSample::TRIGGER_ITERATION));
static_assert(same(SampleTrigger::kInterval, pb::CacheSample::TRIGGER_INTERVAL));
static_assert(same(SampleTrigger::kStop, pb::CacheSample::TRIGGER_STOP));
static_assert(same(SampleTrigger::kMisses, pb::CacheSample::TRIGGER_MISSES));
static_assert(same(SampleTrigger::kMisses, pb::CacheSample::Trigger_MAX));

static_assert(same(ProbeReason::kUnspecified, pb::PROBE_REASON_UNSPECIFIED));
static_assert(same(ProbeReason::kFullPrecisionUnderAutocast, pb::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST));
static_assert(same(ProbeReason::kLowPrecisionMeetsFp32, pb::PROBE_REASON_LOW_PRECISION_MEETS_FP32));
static_assert(same(ProbeReason::kDtypes, pb::PROBE_REASON_DTYPES));
static_assert(same(ProbeReason::kDtypes, pb::ProbeReason_MAX));

static_assert(same(LocationKind::kUnspecified, pb::SourceLocation::KIND_UNSPECIFIED));
static_assert(same(LocationKind::kPython, pb::SourceLocation::KIND_PYTHON));
static_assert(same(LocationKind::kTorchScript, pb::SourceLocation::KIND_TORCHSCRIPT));
static_assert(same(LocationKind::kNone, pb::SourceLocation::KIND_NONE));
static_assert(same(LocationKind::kNone, pb::SourceLocation::Kind_MAX));

// OpFields::ok maps to OP_OUTCOME_OK / OP_OUTCOME_ERROR in the encoder and
// the JSON writer; a third outcome would need a record field.
static_assert(pb::OpOutcome_MAX == pb::OP_OUTCOME_ERROR);

}  // namespace castscope::schema_check
