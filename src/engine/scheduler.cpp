#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "core/check.h"

namespace tessera {

Scheduler::Scheduler(Forward& forward, SchedulerOptions options)
    : forward_(forward),
      options_(options),
      hidden_size_(forward.model().config().hidden_size),
      vocab_size_(forward.model().config().vocab_size) {
  TS_CHECK(!(options_.named_prefixes && options_.preemption), "named prefixes with preemption");
  if (options_.prefix_caching && (forward.model().has_entry() || options_.named_prefixes) && forward.status().ok())
    prefix_cache_ = std::make_unique<PrefixCache>(forward.kv_pool());
}

Status Scheduler::open(uint64_t id, int64_t capacity) {
  if (sequences_.contains(id)) return Status::invalid_input("sequence " + std::to_string(id) + " is already open");
  if (sequences_.size() >= options_.max_sequences)
    return Status::overloaded(std::to_string(sequences_.size()) + " sequences are open, the most this engine runs");
  TS_RETURN_IF_ERROR(forward_.status());
  sequences_.emplace(id, Sequence{.cache = forward_.make_cache(capacity), .age = next_age_++});
  return {};
}

SampledLogprobs log_softmax(std::span<const float> logits, int32_t token, int top) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x - max));
  const auto normalizer = static_cast<float>(max + std::log(sum));
  SampledLogprobs out{.sampled = {token, logits[static_cast<size_t>(token)] - normalizer}};
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto k = std::min<size_t>(static_cast<size_t>(top), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
                    });
  for (size_t i = 0; i < k; ++i) out.top.push_back({order[i], logits[static_cast<size_t>(order[i])] - normalizer});
  return out;
}

Status Scheduler::start(uint64_t id, const SamplingParams& params, std::vector<int32_t> prompt, int top_logprobs,
                        std::vector<int32_t> output) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return Status::invalid_input("sequence " + std::to_string(id) + " is not open");
  TS_CHECK(forward_.model().has_exit(), "a sampler on a range that does not end the model");
  TS_RETURN_IF_ERROR(validate(params, vocab_size_));
  for (const auto* ids : {&prompt, &output})
    for (const int32_t token : *ids)
      if (token < 0 || token >= vocab_size_)
        return Status::invalid_input(std::string(ids == &prompt ? "prompt" : "output") + " token id " +
                                     std::to_string(token) + " is outside the vocabulary");
  Sequence& sequence = it->second;
  sequence.sampler.emplace(params, vocab_size_);
  sequence.sampler->skip(output.size());
  sequence.top_logprobs = top_logprobs;
  sequence.prompt = std::move(prompt);
  sequence.output = std::move(output);
  return {};
}

Status Scheduler::feed_ids(uint64_t id, std::vector<int32_t> ids) {
  TS_CHECK(forward_.model().has_entry(), "token ids on a range starting at layer ", forward_.model().range().begin);
  for (const int32_t token : ids)
    if (token < 0 || token >= vocab_size_)
      return Status::invalid_input("token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                   std::to_string(vocab_size_) + ")");
  const auto tokens = static_cast<int64_t>(ids.size());
  return queue(id, Feed{.ids = std::move(ids), .tokens = tokens});
}

Result<int64_t> Scheduler::feed_prompt(uint64_t id, std::vector<int32_t> ids, const std::string& cache_salt) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return Status::invalid_input("sequence " + std::to_string(id) + " is not open");
  Sequence& sequence = it->second;
  TS_CHECK(sequence.cache.length() == 0 && sequence.feeds.empty(), "a prompt fed to a sequence already started");
  for (const int32_t token : ids)  // before anything is shared
    if (token < 0 || token >= vocab_size_)
      return Status::invalid_input("token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                   std::to_string(vocab_size_) + ")");
  int64_t cached = 0;
  if (prefix_cache_ && !ids.empty()) {
    TS_CHECK(!options_.named_prefixes, "feed_prompt with named prefixes");
    const int64_t bs = forward_.kv_pool().block_size();
    // The last token always runs: its logits are the feed's output.
    const int64_t max_blocks = std::min(static_cast<int64_t>(ids.size()) - 1, sequence.cache.capacity()) / bs;
    PrefixCache::Hit hit = prefix_cache_->lookup(ids, cache_salt, max_blocks);
    sequence.cache.share_prefix(hit.blocks);
    cached = sequence.cache.length();
    sequence.salt = cache_salt;
    sequence.chain = std::move(hit.chain);
    sequence.cached = sequence.chain.size();
    sequence.tokens.assign(ids.begin(), ids.begin() + cached);
    prefix_queries_ += ids.size();
    prefix_hits_ += static_cast<uint64_t>(cached);
  }
  ids.erase(ids.begin(), ids.begin() + cached);
  if (Status queued = feed_ids(id, std::move(ids)); !queued.ok()) {
    sequence.cache.truncate(0);
    sequence.tokens.clear();
    sequence.chain.clear();
    sequence.cached = 0;
    return queued;
  }
  return cached;
}

Result<int64_t> Scheduler::take_cached(uint64_t id, std::span<const PrefixCache::Digest> chain) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return Status::invalid_input("sequence " + std::to_string(id) + " is not open");
  Sequence& sequence = it->second;
  if (sequence.cache.length() != 0 || !sequence.feeds.empty())
    return Status::invalid_input("sequence " + std::to_string(id) + " has started: it cannot take a cached prefix");
  if (!prefix_cache_) return 0;
  TS_CHECK(options_.named_prefixes, "take_cached without named prefixes");
  const auto most = static_cast<size_t>(sequence.cache.capacity() / forward_.kv_pool().block_size());
  PrefixCache::Hit hit = prefix_cache_->find(chain.first(std::min(chain.size(), most)));
  sequence.cache.share_prefix(hit.blocks);
  sequence.chain = std::move(hit.chain);
  sequence.cached = sequence.chain.size();
  return static_cast<int64_t>(sequence.cached);
}

Status Scheduler::name_blocks(uint64_t id, std::optional<int64_t> reuse, std::vector<PrefixCache::Digest> names) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return Status::invalid_input("sequence " + std::to_string(id) + " is not open");
  if (!prefix_cache_) return {};
  TS_CHECK(options_.named_prefixes, "name_blocks without named prefixes");
  Sequence& sequence = it->second;
  const int64_t bs = forward_.kv_pool().block_size();
  if (reuse) {
    const int64_t held = sequence.cache.length() / bs;
    if (*reuse < 0 || *reuse > held || !sequence.feeds.empty())
      return Status::invalid_input("blocks: reuse " + std::to_string(*reuse) + " of sequence " + std::to_string(id) +
                                   ", which holds " + std::to_string(held) + " cached blocks" +
                                   (sequence.feeds.empty() ? "" : " and has input queued"));
    sequence.cache.truncate(*reuse * bs);
    sequence.chain.resize(static_cast<size_t>(*reuse));
    sequence.cached = std::min(sequence.cached, sequence.chain.size());
  }
  if (sequence.chain.size() + names.size() > static_cast<size_t>(sequence.cache.capacity() / bs))
    return Status::invalid_input("blocks: " + std::to_string(sequence.chain.size() + names.size()) +
                                 " named blocks for sequence " + std::to_string(id) + " of " +
                                 std::to_string(sequence.cache.capacity()) + " positions");
  sequence.chain.insert(sequence.chain.end(), names.begin(), names.end());
  return {};
}

Status Scheduler::feed_hidden(uint64_t id, std::vector<float> hidden) {
  TS_CHECK(!forward_.model().has_entry(), "hidden states on a range starting at layer 0");
  if (hidden.size() % static_cast<size_t>(hidden_size_) != 0)
    return Status::invalid_input("hidden states of " + std::to_string(hidden.size()) +
                                 " values are not a multiple of hidden_size " + std::to_string(hidden_size_));
  const auto tokens = static_cast<int64_t>(hidden.size()) / hidden_size_;
  return queue(id, Feed{.hidden = std::move(hidden), .tokens = tokens});
}

Status Scheduler::queue(uint64_t id, Feed feed) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return Status::invalid_input("sequence " + std::to_string(id) + " is not open");
  if (feed.tokens == 0) return Status::invalid_input("no tokens to run");
  if (queued_ >= options_.max_queued_feeds)
    return Status::overloaded(std::to_string(queued_) + " inputs are waiting, the most this engine queues");
  if (std::vector<int32_t>& replay = it->second.replay; !replay.empty()) {  // preempted while idle
    feed.ids.insert(feed.ids.begin(), replay.begin(), replay.end());
    feed.tokens += static_cast<int64_t>(replay.size());
    replay.clear();
  }
  feed.order = next_order_++;
  queued_bytes_ += feed.bytes();
  it->second.feeds.push_back(std::move(feed));
  ++queued_;
  return {};
}

void Scheduler::close(uint64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  queued_ -= it->second.feeds.size();
  for (const Feed& feed : it->second.feeds) queued_bytes_ -= feed.bytes();
  sequences_.erase(it);  // the cache gives its blocks back
}

void Scheduler::cancel(uint64_t id) { close(id); }

void Scheduler::cancel_all() {
  sequences_.clear();
  queued_ = 0;
  queued_bytes_ = 0;
}

int64_t Scheduler::length(uint64_t id) const {
  const Sequence& sequence = sequences_.at(id);
  return sequence.cache.length() + static_cast<int64_t>(sequence.replay.size());
}

void Scheduler::truncate(uint64_t id, int64_t n) {
  Sequence& sequence = sequences_.at(id);
  TS_CHECK(sequence.feeds.empty(), "truncating sequence ", id, " with ", sequence.feeds.size(), " inputs queued");
  if (!sequence.replay.empty()) {  // preempted: it holds no blocks
    sequence.replay.resize(std::min(sequence.replay.size(), static_cast<size_t>(n)));
    return;
  }
  sequence.cache.truncate(n);
  if (forward_.model().has_entry() && !options_.named_prefixes) sequence.tokens.resize(static_cast<size_t>(n));
  if (prefix_cache_) {
    sequence.chain.resize(std::min(sequence.chain.size(), static_cast<size_t>(n / forward_.kv_pool().block_size())));
    sequence.cached = std::min(sequence.cached, sequence.chain.size());
  }
}

std::optional<uint64_t> Scheduler::newest_victim(uint64_t age, const std::vector<Chosen>& chosen) const {
  std::optional<uint64_t> victim;
  uint64_t newest = age;
  for (const auto& [id, sequence] : sequences_) {
    if (sequence.age <= newest || sequence.cache.blocks().empty()) continue;
    if (std::any_of(chosen.begin(), chosen.end(), [id = id](const Chosen& c) { return c.id == id; })) continue;
    newest = sequence.age;
    victim = id;
  }
  return victim;
}

// Recompute preemption: what the sequence's KV cache held is run again later,
// ahead of the rest of its input, by the same chunk-invariant Forward.
void Scheduler::preempt(uint64_t id) {
  Sequence& sequence = sequences_.at(id);
  TS_CHECK(static_cast<int64_t>(sequence.tokens.size()) == sequence.cache.length(), "sequence ", id, " holds ",
           sequence.cache.length(), " positions but ", sequence.tokens.size(), " known ids");
  std::vector<int32_t> held = std::exchange(sequence.tokens, {});
  sequence.cache.truncate(0);
  sequence.chain.clear();
  sequence.cached = 0;
  sequence.held = true;
  ++preemptions_;
  if (sequence.feeds.empty()) {
    sequence.replay = std::move(held);
    return;
  }
  Feed& head = sequence.feeds.front();
  queued_bytes_ -= head.bytes();
  held.insert(held.end(), head.ids.begin() + head.done, head.ids.end());
  head.ids = std::move(held);
  head.tokens = static_cast<int64_t>(head.ids.size());
  head.done = 0;
  queued_bytes_ += head.bytes();
}

StepOutput Scheduler::closed_for_room(uint64_t id) {
  ++preemptions_;
  close(id);
  return {.id = id,
          .status = Status::overloaded("preempted: the KV pool is full (" +
                                       std::to_string(forward_.kv_pool().total_blocks()) + " blocks, --kv-memory)"),
          .preempted = true};
}

int64_t Scheduler::evict_cached(int64_t blocks) { return prefix_cache_ ? prefix_cache_->evict(blocks) : 0; }

void Scheduler::cache_full_blocks(Sequence& sequence) {
  const int64_t bs = forward_.kv_pool().block_size();
  const auto full = static_cast<size_t>(sequence.cache.length() / bs);
  while (!options_.named_prefixes && sequence.chain.size() < full) {
    const size_t i = sequence.chain.size();
    const auto tokens = std::span<const int32_t>(sequence.tokens).subspan(i * static_cast<size_t>(bs), bs);
    sequence.chain.push_back(
        PrefixCache::digest(sequence.chain.empty() ? nullptr : &sequence.chain.back(), sequence.salt, tokens));
  }
  for (; sequence.cached < std::min(full, sequence.chain.size()); ++sequence.cached)
    prefix_cache_->insert(std::span(sequence.chain).first(sequence.cached + 1),
                          sequence.cache.blocks()[sequence.cached]);
}

size_t Scheduler::held_sequences() const {
  return static_cast<size_t>(
      std::count_if(sequences_.begin(), sequences_.end(), [](const auto& s) { return s.second.held; }));
}

uint64_t Scheduler::kv_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [id, sequence] : sequences_) bytes += sequence.cache.bytes();
  return bytes;
}

// Decode steps (one token left in the head feed) first, then the rest, each
// group oldest first; a feed runs as far as the step's token budget allows.
std::vector<Scheduler::Chosen> Scheduler::choose(std::vector<StepOutput>& failed) {
  std::vector<std::pair<uint64_t, uint64_t>> waiting;  // (order, id)
  for (const auto& [id, sequence] : sequences_)
    if (!sequence.feeds.empty()) waiting.emplace_back(sequence.feeds.front().order, id);
  std::sort(waiting.begin(), waiting.end());
  std::stable_partition(waiting.begin(), waiting.end(), [&](const auto& w) {
    const Feed& feed = sequences_.at(w.second).feeds.front();
    return feed.tokens - feed.done == 1;
  });

  std::vector<Chosen> chosen;
  std::vector<std::pair<uint64_t, int64_t>> short_of_blocks;  // (id, blocks): waits, with preemption
  int64_t budget = options_.max_step_tokens;
  const KvPool& pool = forward_.kv_pool();
  int64_t reserved = 0;  // blocks the chosen feeds take when they run
  auto available = [&] { return pool.free_blocks() - reserved; };
  for (const auto& [order, id] : waiting) {
    if (chosen.size() >= options_.max_step_sequences || budget == 0) break;
    if (!sequences_.contains(id)) continue;  // closed to make room for an older one (close_preempted)
    Sequence& sequence = sequences_.at(id);
    const Feed& feed = sequence.feeds.front();
    const KvCache& cache = sequence.cache;
    if (cache.length() + feed.tokens - feed.done > cache.capacity()) {
      failed.push_back(
          {id, Status::invalid_input("sequence of " + std::to_string(cache.length() + feed.tokens - feed.done) +
                                     " tokens exceeds the KV cache capacity of " + std::to_string(cache.capacity()))});
      continue;
    }
    const int64_t tokens = std::min(feed.tokens - feed.done, budget);
    const int64_t blocks = cache.blocks_needed(tokens);
    if (blocks > available()) evict_cached(blocks - available());
    while ((options_.preemption || options_.close_preempted) && blocks > available()) {
      const std::optional<uint64_t> victim = newest_victim(sequence.age, chosen);
      if (!victim) break;
      if (options_.preemption) {
        preempt(*victim);
      } else {
        failed.push_back(closed_for_room(*victim));
      }
      if (blocks > available()) evict_cached(blocks - available());
    }
    if (blocks > available()) {
      const int64_t bs = pool.block_size();
      if (!options_.preemption && !options_.close_preempted) {
        // Alone it cannot run: the pool is full of other sequences' blocks.
        if (chosen.empty()) failed.push_back({id, pool.check_free(blocks)});
      } else if (const int64_t whole = (cache.length() + tokens + bs - 1) / bs; whole > pool.total_blocks()) {
        failed.push_back(
            {id, Status::overloaded("a sequence of " + std::to_string(cache.length() + tokens) + " positions needs " +
                                    std::to_string(whole) + " KV blocks; the whole pool has " +
                                    std::to_string(pool.total_blocks()) + " (--kv-memory)")});
      } else {
        short_of_blocks.emplace_back(id, blocks);  // older sequences hold the blocks: it waits for them
        sequence.held = true;
      }
      continue;
    }
    reserved += blocks;
    budget -= tokens;
    sequence.held = false;
    chosen.push_back({id, tokens});
  }
  // A step that runs nothing would leave it waiting for ever; on a pipeline
  // stage, the newest of those short gives way instead (its elders hold the blocks).
  std::erase_if(short_of_blocks, [&](const auto& s) { return !sequences_.contains(s.first); });
  if (chosen.empty() && !short_of_blocks.empty()) {
    if (options_.close_preempted) {
      const auto newest = std::max_element(short_of_blocks.begin(), short_of_blocks.end(), [&](auto a, auto b) {
        return sequences_.at(a.first).age < sequences_.at(b.first).age;
      });
      failed.push_back(closed_for_room(newest->first));
    } else {
      failed.push_back({short_of_blocks.front().first, pool.check_free(short_of_blocks.front().second)});
    }
  }
  for (const StepOutput& f : failed) close(f.id);
  return chosen;
}

std::vector<StepOutput> Scheduler::step(const std::function<void()>& meanwhile) {
  std::vector<StepOutput> outputs;
  forward_failure_ = {};
  last_step_size_ = 0;
  last_step_tokens_ = 0;
  const std::vector<Chosen> chosen = choose(outputs);
  if (chosen.empty()) {
    if (meanwhile) meanwhile();
    return outputs;
  }

  std::vector<Forward::Part> parts;
  std::vector<int32_t> ids;
  std::vector<float> hidden;
  for (const Chosen& c : chosen) {
    Sequence& sequence = sequences_.at(c.id);
    const Feed& feed = sequence.feeds.front();
    parts.push_back({&sequence.cache, c.tokens});
    if (forward_.model().has_entry()) {
      ids.insert(ids.end(), feed.ids.begin() + feed.done, feed.ids.begin() + feed.done + c.tokens);
    } else {
      const auto row = static_cast<std::ptrdiff_t>(hidden_size_);
      hidden.insert(hidden.end(), feed.hidden.begin() + feed.done * row,
                    feed.hidden.begin() + (feed.done + c.tokens) * row);
    }
  }
  // When every sequence of the step takes the plain greedy token (or finishes no
  // feed this step), the device chooses the tokens and no logits come back.
  const bool greedy =
      forward_.model().has_entry() && forward_.model().has_exit() &&
      std::all_of(chosen.begin(), chosen.end(), [&](const Chosen& c) {
        const Sequence& sequence = sequences_.at(c.id);
        const Feed& feed = sequence.feeds.front();
        const bool finishes = feed.done + c.tokens == feed.tokens;
        return !finishes || (sequence.sampler && sequence.sampler->plain_greedy() && sequence.top_logprobs < 0);
      });
  Result<std::vector<float>> out = std::vector<float>{};
  Result<std::vector<int32_t>> greedy_tokens = std::vector<int32_t>{};
  // A pass of greedy tokens that the device queues leaves the host free until
  // the tokens are taken: `meanwhile` runs then. Otherwise it runs first.
  const bool queued = greedy && !forward_.device().computes_in_calls();
  if (meanwhile && !queued) meanwhile();
  if (greedy) {
    const Status launched = forward_.launch_greedy(ids, parts);
    if (meanwhile && queued) meanwhile();
    greedy_tokens = launched.ok() ? forward_.greedy_tokens() : Result<std::vector<int32_t>>(launched);
  } else {
    out = forward_.model().has_entry() ? forward_.step_ids(ids, parts) : forward_.step_hidden(hidden, parts);
  }
  if (const Status status = greedy ? greedy_tokens.status() : out.status(); !status.ok()) {
    // checked inputs make this rare; every sequence of the step gets the error
    forward_failure_ = status;
    for (const Chosen& c : chosen) {
      outputs.push_back({c.id, status});
      close(c.id);
    }
    return outputs;
  }
  last_step_size_ = chosen.size();
  for (const Chosen& c : chosen) last_step_tokens_ += c.tokens;
  largest_step_ = std::max(largest_step_, chosen.size());

  const bool exit = forward_.model().has_exit();
  size_t offset = 0, part = 0;
  for (const Chosen& c : chosen) {
    Sequence& sequence = sequences_.at(c.id);
    Feed& feed = sequence.feeds.front();
    const size_t width = greedy ? 0
                         : exit ? static_cast<size_t>(vocab_size_)
                                : static_cast<size_t>(c.tokens * hidden_size_);
    const auto rows = std::span<float>(*out).subspan(offset, width);
    offset += width;
    const int32_t greedy_token = greedy ? (*greedy_tokens)[part] : -1;
    ++part;
    if (!exit) sequence.hidden_out.insert(sequence.hidden_out.end(), rows.begin(), rows.end());
    if (forward_.model().has_entry() && !options_.named_prefixes)
      sequence.tokens.insert(sequence.tokens.end(), feed.ids.begin() + feed.done,
                             feed.ids.begin() + feed.done + c.tokens);
    if (prefix_cache_) cache_full_blocks(sequence);
    feed.done += c.tokens;
    if (feed.done < feed.tokens) continue;  // more chunks to come

    StepOutput result{.id = c.id};
    if (!exit) {
      result.values = std::exchange(sequence.hidden_out, {});
    } else if (greedy) {
      result.token = greedy_token;  // what sample() gives these rows (Sampler::plain_greedy)
      sequence.output.push_back(result.token);
    } else if (sequence.sampler) {
      std::vector<float> raw;  // the sampler changes its logits in place
      if (sequence.top_logprobs >= 0) raw.assign(rows.begin(), rows.end());
      result.token = sequence.sampler->sample(rows, sequence.prompt, sequence.output);
      if (sequence.top_logprobs >= 0) result.logprobs = log_softmax(raw, result.token, sequence.top_logprobs);
      sequence.output.push_back(result.token);
    } else {
      result.values.assign(rows.begin(), rows.end());
    }
    queued_bytes_ -= feed.bytes();
    sequence.feeds.pop_front();
    --queued_;
    outputs.push_back(std::move(result));
  }
  return outputs;
}

}  // namespace tessera
