// The flags of a tensor-parallel group (`tessera rank`, and `generate --tp`):
// the members in rank order (trust-file names; rank 0 leads: it runs the
// scheduler), this node's identity, the trust file, sealing, and how long to
// wait for the others.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "collective/nccl/nccl_group.h"
#include "collective/tcp/tcp_group.h"
#include "engine/local_engine.h"
#include "model/model.h"
#include "net/identity.h"
#include "net/trust.h"
#include "pipeline/shard_shipping.h"

namespace tessera {

struct TpOptions {
  std::vector<std::string> members;  // rank order; empty: no TP group
  std::string identity;
  std::string trust;
  bool plain = false;
  double connect_timeout_s = 30;     // forming the group
  double progress_timeout_s = 10;    // any one wait for a rank that is alive but silent on its data connection
  double heartbeat_timeout_s = 0.5;  // a rank silent this long (no heartbeat) is frozen: the group fails
  std::string ship_weights;          // the leader's --tp-ship-weights; empty: ranks read their own checkpoint
  bool nccl = false;                 // GPU ranks of one host: device buffers summed through NCCL
};

// The members' flag is `members_flag` ("--tp" for generate, "--members" for
// rank); `with_identity` adds --identity, --trust and --plain (generate has
// them already, for --pipeline).
inline void add_tp_options(CLI::App& cmd, TpOptions& o, const std::string& members_flag, bool required,
                           bool with_identity) {
  auto* members = cmd.add_option(members_flag, o.members,
                                 "The tensor-parallel group: trust-file names in rank order, comma-separated (rank 0 "
                                 "runs the scheduler: tessera generate; the others run tessera rank)")
                      ->delimiter(',');
  if (required) members->required();
  if (with_identity) {
    cmd.add_option("--identity", o.identity, "With the group: this node's identity directory (tessera keygen)")
        ->required(required);
    cmd.add_option("--trust", o.trust, "With the group: the cluster trust file")->required(required);
    cmd.add_flag("--plain", o.plain,
                 "For trusted links: ranks are still authenticated (mutual TLS), but tensors travel unsealed");
  }
  cmd.add_option("--group-timeout", o.connect_timeout_s, "Seconds to wait for the group's other ranks to connect")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd.add_option("--progress-timeout", o.progress_timeout_s,
                 "Seconds a rank that still heartbeats may keep the others waiting for its data inside a step before "
                 "the step fails on every rank")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  cmd.add_option("--group-heartbeat-timeout", o.heartbeat_timeout_s,
                 "Seconds a rank may stay silent before the group fails as frozen (every rank heartbeats every "
                 "0.1 s, however busy; raise it on lossy links)")
      ->check(CLI::Range(0.3, 3600.0))
      ->capture_default_str();
  cmd.add_flag("--nccl", o.nccl,
               "GPU ranks of one host (--device cuda:N, one GPU each): sums through NCCL over the GPUs' links, "
               "plain (GPUs of one host trust each other); the group's other messages stay on its authenticated "
               "links. Every member passes it")
      ->needs(members);
  if (members_flag == "--tp")  // a leader's
    cmd.add_option("--tp-ship-weights", o.ship_weights,
                   "none|lz4|int8|int8+lz4|int4|int4+lz4: ship each rank started without --model its shard when "
                   "the group forms (int8/int4 quantize matrices; default: every rank reads its own checkpoint)")
        ->needs(members);
}

// The leader's --tp-ship-weights (nullopt when unset).
inline Result<std::optional<pipeline::ShipEncoding>> tp_ship_encoding(const TpOptions& o) {
  if (o.ship_weights.empty()) return std::optional<pipeline::ShipEncoding>();
  TS_ASSIGN_OR_RETURN(const pipeline::ShipEncoding ship, pipeline::parse_ship_encoding(o.ship_weights));
  return std::optional(ship);
}

// Why a coordinator (generate or serve with --pipeline) takes no --tp: in a
// pipeline of TP groups each stage leads its own group.
inline Status tp_beside_a_pipeline() {
  return Status::invalid_input(
      "--tp with --pipeline: a stage of the pipeline leads its own TP group (tessera stage --tp NAMES --tp-identity "
      "DIR, docs/distributed.md); the coordinator takes --pipeline alone");
}

struct TpMember {
  net::Identity identity;
  net::TrustFile trust;
  int rank = 0;
};

// This node's identity and rank in the group (its name's index in members).
inline Result<TpMember> load_tp_member(const TpOptions& o) {
  if (o.identity.empty() || o.trust.empty()) return Status::invalid_input("a TP group needs --identity and --trust");
  TpMember m;
  TS_ASSIGN_OR_RETURN(m.identity, net::load_identity(o.identity));
  TS_ASSIGN_OR_RETURN(m.trust, net::read_trust_file(o.trust));
  for (size_t i = 0; i < o.members.size(); ++i)
    if (o.members[i] == m.identity.name) m.rank = static_cast<int>(i);
  if (std::find(o.members.begin(), o.members.end(), m.identity.name) == o.members.end())
    return Status::invalid_input("this node '" + m.identity.name + "' is not one of the TP group's members");
  return m;
}

// The group over TCP; with --nccl, the NCCL group over it on `device`'s GPU.
inline Result<Group> connect_tp_group(const TpOptions& o, const TpMember& m, const std::string& device) {
  std::optional<int> ordinal;
  if (o.nccl) {
    TS_ASSIGN_OR_RETURN(ordinal, nccl_ordinal(device));
  }
  collective::GroupOptions options;
  options.members = o.members;
  options.plain = o.plain;
  options.connect_timeout = std::chrono::milliseconds(std::llround(o.connect_timeout_s * 1000));
  options.progress_timeout = std::chrono::milliseconds(std::llround(o.progress_timeout_s * 1000));
  options.heartbeat_timeout = std::chrono::milliseconds(std::llround(o.heartbeat_timeout_s * 1000));
  TS_ASSIGN_OR_RETURN(Group group, collective::connect_group(m.identity, m.trust, options));
  if (!ordinal) return group;
  return make_nccl_group(std::move(group), {.device = *ordinal, .timeout = options.progress_timeout});
}

// Rank 0's engine (generate --tp, chat --tp): its shard of `model` (a view of
// the whole; only its rows and its copied columns are read) on a Forward over
// the group, which waits until the other ranks (tessera rank) have joined.
struct TpEngine {
  std::unique_ptr<Model> shard;  // outlives the engine, which refers to it
  LocalEngine engine;
  std::string name;  // for the stats line: the device, the rank and sealing, the KV pool
};

inline Result<TpEngine> make_tp_engine(const Model& model, const TpOptions& o, EngineOptions engine) {
  TS_ASSIGN_OR_RETURN(const TpMember member, load_tp_member(o));
  if (member.rank != 0)
    return Status::invalid_input("--tp runs rank 0, the leader; '" + member.identity.name + "' is rank " +
                                 std::to_string(member.rank) + ": run tessera rank there");
  const auto ranks = static_cast<int>(o.members.size());
  TpEngine tp;
  TS_ASSIGN_OR_RETURN(const auto ship, tp_ship_encoding(o));
  TS_ASSIGN_OR_RETURN(Model shard, model.cut(Shard{0, ranks}));
  tp.shard = std::make_unique<Model>(std::move(shard));
  TS_ASSIGN_OR_RETURN(Group group, connect_tp_group(o, member, engine.device));
  TS_RETURN_IF_ERROR(pipeline::offer_shards(group, model, ship, o.members));
  engine.forward.group = std::move(group);
  TS_ASSIGN_OR_RETURN(tp.engine, LocalEngine::create(*tp.shard, engine));
  tp.name = tp.engine.device->name() + ", rank 0 of " + std::to_string(ranks) + (o.plain ? " (plain)" : " (sealed)") +
            "; KV cache " + tp.engine.forward->kv_pool().describe();
  return tp;
}

}  // namespace tessera
