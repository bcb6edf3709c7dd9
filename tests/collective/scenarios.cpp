#include "collective/scenarios.h"

#include <cstring>

#include "collective/tcp/sum.h"

namespace tessera::collective::test {

std::string collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllSum: return "all_sum";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "send_recv";
  }
  return "?";
}

std::vector<uint8_t> input(int rank, uint64_t elements, DType dtype) {
  std::vector<float> values(elements);
  for (uint64_t i = 0; i < elements; ++i) {
    // Values whose sums round differently in different orders, so a change of
    // summation order shows in the bits.
    values[i] =
        static_cast<float>(static_cast<int64_t>((i * 7919 + static_cast<uint64_t>(rank) * 104729) % 2001) - 1000) *
        (0.001f + 0.37f * static_cast<float>(rank + 1));
  }
  std::vector<uint8_t> bytes(elements * dtype_size(dtype));
  store(values, bytes, dtype);
  return bytes;
}

namespace {

// The fixed-order sum over ranks of their slice [begin, begin+count).
std::vector<uint8_t> sum_slice(int size, uint64_t total, uint64_t begin, uint64_t count, DType dtype) {
  std::vector<float> acc(count);
  const size_t element = dtype_size(dtype);
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> x = input(r, total, dtype);
    accumulate(acc, std::span(x).subspan(begin * element, count * element), dtype, r == 0);
  }
  std::vector<uint8_t> out(count * element);
  store(acc, out, dtype);
  return out;
}

}  // namespace

Result<std::vector<uint8_t>> run(Group& group, Collective collective, uint64_t elements, DType dtype) {
  const int rank = group.rank();
  const int size = group.size();
  const size_t element = dtype_size(dtype);
  switch (collective) {
    case Collective::kAllSum: {
      std::vector<uint8_t> data = input(rank, elements, dtype);
      TS_RETURN_IF_ERROR(group.all_sum(data, dtype));
      return data;
    }
    case Collective::kReduceScatter: {
      const std::vector<uint8_t> in = input(rank, elements * size, dtype);
      std::vector<uint8_t> out(elements * element);
      TS_RETURN_IF_ERROR(group.reduce_scatter(in, out, dtype));
      return out;
    }
    case Collective::kAllGather: {
      const std::vector<uint8_t> in = input(rank, elements, dtype);
      std::vector<uint8_t> out(in.size() * size);
      TS_RETURN_IF_ERROR(group.all_gather(in, out, dtype));
      return out;
    }
    case Collective::kBroadcast: {
      std::vector<uint8_t> data = input(rank, elements, dtype);
      TS_RETURN_IF_ERROR(group.broadcast(data, dtype, 0));
      return data;
    }
    case Collective::kSendRecv: {  // rank 0 sends to rank 1; the others take no part
      std::vector<uint8_t> data = input(rank, elements, dtype);
      if (rank == 0) TS_RETURN_IF_ERROR(group.send(data, dtype, 1));
      if (rank == 1) TS_RETURN_IF_ERROR(group.recv(data, dtype, 0));
      return data;
    }
  }
  return Status::internal("unknown collective");
}

std::vector<uint8_t> expected(int rank, int size, Collective collective, uint64_t elements, DType dtype) {
  switch (collective) {
    case Collective::kAllSum: return sum_slice(size, elements, 0, elements, dtype);
    case Collective::kReduceScatter: return sum_slice(size, elements * size, elements * rank, elements, dtype);
    case Collective::kAllGather: {
      std::vector<uint8_t> out;
      for (int r = 0; r < size; ++r) {
        const std::vector<uint8_t> x = input(r, elements, dtype);
        out.insert(out.end(), x.begin(), x.end());
      }
      return out;
    }
    case Collective::kBroadcast: return input(0, elements, dtype);
    case Collective::kSendRecv: return input(rank == 1 ? 0 : rank, elements, dtype);
  }
  return {};
}

uint64_t tamper_elements(Collective collective, int size) {
  const uint64_t per_message = 640;  // 2560 f32 bytes: pieces of 1024, 1024, 512
  return collective == Collective::kAllSum ? per_message * size : per_message;
}

std::vector<TamperCase> tamper_cases(bool quick) {
  struct Kind {
    TamperKind kind;
    const char* field;
    const char* expect;
  };
  const std::vector<Kind> kinds = {
      {TamperKind::kCiphertext, nullptr, "authentication failed"},
      {TamperKind::kTag, nullptr, "authentication failed"},
      {TamperKind::kElementCount, nullptr, "authentication failed"},
      {TamperKind::kTruncate, nullptr, "authentication failed"},
      {TamperKind::kHeader, "magic", "piece header magic"},
      {TamperKind::kHeader, "layout", "piece header layout"},
      {TamperKind::kHeader, "op", "piece header op"},
      {TamperKind::kHeader, "dtype", "piece header dtype"},
      {TamperKind::kHeader, "generation", "piece header generation"},
      {TamperKind::kHeader, "sender", "piece header sender"},
      {TamperKind::kHeader, "receiver", "piece header receiver"},
      {TamperKind::kHeader, "counter", "piece header counter"},
      {TamperKind::kHeader, "piece_index", "piece header piece_index"},
      {TamperKind::kHeader, "piece_count", "piece header piece_count"},
      {TamperKind::kReplay, nullptr, "piece header piece_index"},
      {TamperKind::kReorder, nullptr, "piece header piece_index"},
      {TamperKind::kDrop, nullptr, "piece header piece_index"},
      {TamperKind::kDuplicate, nullptr, "piece header piece_index"},
      {TamperKind::kWrongGeneration, nullptr, "piece header generation"},
      {TamperKind::kWrongSender, nullptr, "piece header sender"},
  };
  const std::vector<uint64_t> counters = quick ? std::vector<uint64_t>{1} : std::vector<uint64_t>{0, 1, 200};
  std::vector<TamperCase> cases;
  for (Collective collective : kCollectives) {
    for (uint64_t counter : counters) {
      for (const Kind& kind : kinds) {
        TamperCase c;
        c.tamper.generation = 2 * cases.size() + 1;  // each case: its generation, then one clean one
        c.tamper.kind = kind.kind;
        c.tamper.to_rank = 1;
        c.tamper.counter = counter;
        c.tamper.piece = 1;
        if (kind.field) c.tamper.header_offset = *header_field_offset(kind.field);
        c.collective = collective;
        c.expect = kind.expect;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

}  // namespace tessera::collective::test
