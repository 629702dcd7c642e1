// The gRPC adapter: Ingest, Query and Subscribe over the collector core. It
// only translates (bytes to batches, statuses to gRPC codes, acks to
// messages); rules live in the core.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "server/src/batch/batch_validation.h"
#include "server/src/ingest/collector_core.h"
#include "server/src/service/idle_streams.h"
#include "server/src/status.h"

namespace castscope::collector {

struct ServiceOptions {
  std::string token;  // empty: no authentication
  BatchLimits limits;
  size_t max_streams = 64;  // concurrent ingest streams; past it UNAVAILABLE (0: no limit)
  IdlePolicy idle;          // streams that send nothing (idle_streams.h)
};

class CollectorServices {
 public:
  // Opens a read connection for queries on the core's store.
  static Status create(CollectorCore& core, const ServiceOptions& options, std::unique_ptr<CollectorServices>& out);
  ~CollectorServices();

  void register_with(grpc::ServerBuilder& builder);

 private:
  CollectorServices() = default;
  struct Services;  // the three gRPC services and their options
  std::unique_ptr<Services> services_;
};

grpc::Status to_grpc(const Status& status);

// "authorization: Bearer <token>" compared in constant time; OK when no token is set.
grpc::Status check_bearer_token(const grpc::ServerContextBase& context, const std::string& token);

}  // namespace castscope::collector
