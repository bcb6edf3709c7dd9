// `tessera rank`: a tensor-parallel rank other than rank 0. It loads its shard
// of the checkpoint once, then serves leaders until killed: it forms the group
// with the other members (mutual TLS; sealed unless --plain), runs every step
// the leader (rank 0: tessera generate --tp) sends, and when the leader goes
// away or the group fails (a rank killed or frozen, a piece that does not
// open), forms the group anew under fresh keys; the other ranks keep running.
// With --layers A:B it holds its shard of layers [A, B) only: a rank of a
// pipeline stage that is a TP group (tessera stage --tp), whose leader runs the
// same range (checked when the group forms). With --model, a leader whose
// checkpoint's weights digest for those layers is another is refused, naming
// both digests (the rank keeps serving the next leader). Without --model it holds no
// weights until a leader ships them (--tp-ship-weights): it receives its shard
// of the leader's layers when the group forms (pipeline/shard_shipping.h),
// bounded by --max-weight-bytes, and keeps it for the next leader that offers
// the same weights.
//   tessera rank --model DIR --members node0,node1 --identity keys/node1 --trust trust.json
//   tessera rank --members node0,node1 --identity keys/node1 --trust trust.json   (shipped)
#include <cstdio>
#include <optional>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/tp_options.h"
#include "model/digest.h"
#include "model/forward.h"
#include "pipeline/shard_shipping.h"

namespace tessera {
namespace {

struct RankOptions {
  std::string model_dir;          // empty: the leader ships the rank its shard
  std::vector<int64_t> layers;    // [begin, end); empty: every layer (without --model: the leader's)
  uint64_t max_weight_bytes = 0;  // a shipped shard's bound; 0: 90 % of the device's available memory
  TpOptions tp;
  EngineOptions engine;  // the device and its threads (the leader decides the KV pool)
  int sessions = 0;      // stop after this many (0: serve until killed)
};

Status run_rank(const RankOptions& o) {
  TS_ASSIGN_OR_RETURN(const TpMember member, load_tp_member(o.tp));
  if (member.rank == 0)
    return Status::invalid_input("'" + member.identity.name + "' is rank 0, the leader: run tessera generate --tp");
  const auto ranks = static_cast<int>(o.tp.members.size());
  if (o.model_dir.empty() && !o.layers.empty())
    return Status::invalid_input(
        "--layers without --model: a rank that is shipped its shard holds its leader's layers");
  pipeline::HeldShard held;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, make_device(o.engine.device, o.engine.threads));
  const uint64_t max_weight_bytes = o.max_weight_bytes ? o.max_weight_bytes : device->available_memory() / 10 * 9;
  if (!o.model_dir.empty()) {
    std::optional<LayerRange> range;
    if (!o.layers.empty()) range = LayerRange{o.layers[0], o.layers[1]};
    // Mapped whole (only its shard's rows and columns are read), for the digest
    // that a leader's offer must match.
    TS_ASSIGN_OR_RETURN(const Model whole, Model::load(o.model_dir, range));
    held.digest = weights_digest(whole);
    Result<Model> model = whole.cut(Shard{member.rank, ranks});
    if (!model.ok()) return model.status().with_context(o.model_dir);
    held.model = std::make_unique<Model>(std::move(model).value());
    held.own = true;
    std::fprintf(stderr, "[rank] %s: rank %d of %d, layers [%lld, %lld), %llu bytes of weights, on %s\n",
                 member.identity.name.c_str(), member.rank, ranks, static_cast<long long>(held.model->range().begin),
                 static_cast<long long>(held.model->range().end),
                 static_cast<unsigned long long>(held.model->weight_bytes()), device->name().c_str());
  } else {
    std::fprintf(stderr, "[rank] %s: rank %d of %d, on %s; its shard comes from the leader (at most %.1f MiB)\n",
                 member.identity.name.c_str(), member.rank, ranks, device->name().c_str(),
                 static_cast<double>(max_weight_bytes) / (1 << 20));
  }
  const auto log = [](const std::string& line) { std::fprintf(stderr, "[rank] %s\n", line.c_str()); };
  for (int done = 0; o.sessions == 0 || done < o.sessions;) {
    Result<Group> group = connect_tp_group(o.tp, member, o.engine.device);
    if (!group.ok()) {
      std::fprintf(stderr, "[rank] forming the group: %s; trying again\n", group.status().to_string().c_str());
      continue;
    }
    std::fprintf(stderr, "[rank] group formed (%s)\n", o.tp.plain ? "plain" : "sealed");
    ++done;
    Status status = pipeline::take_shard(*group, held, max_weight_bytes, log);
    if (status.ok()) {
      Forward forward(*held.model, *device, {.group = *group});
      status = forward.status().ok() ? forward.follow() : forward.status();
    }
    if (status.ok()) {
      std::fprintf(stderr, "[rank] the leader finished\n");
    } else {
      std::fprintf(stderr, "[rank] the group failed: %s; forming it anew\n", status.to_string().c_str());
    }
  }
  return {};
}

}  // namespace

void register_rank(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RankOptions>();
  CLI::App* cmd = app.add_subcommand("rank", "Run a tensor-parallel rank (rank 0 is tessera generate --tp)");
  cmd->add_option("--model", o->model_dir,
                  "Checkpoint directory (this rank reads only its shard); without it the leader ships the rank its "
                  "shard (--tp-ship-weights) when the group forms");
  cmd->add_option("--max-weight-bytes", o->max_weight_bytes,
                  "Without --model: the most bytes of weights this rank takes from a leader, refused before any is "
                  "received (default: 90 % of the device's available memory)")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  cmd->add_option("--layers", o->layers,
                  "A:B: hold the shard of layers [A, B) only, for a pipeline stage that is a TP group (its leader, "
                  "tessera stage --tp, runs the same range; default: every layer)")
      ->delimiter(':')
      ->expected(2)
      ->check(CLI::NonNegativeNumber);
  add_tp_options(*cmd, o->tp, "--members", /*required=*/true, /*with_identity=*/true);
  add_engine_options(*cmd, o->engine);
  cmd->add_option("--sessions", o->sessions, "Stop after this many leader sessions (default: serve until killed)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->callback([o, &exit_code] {
    const Status status = run_rank(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
