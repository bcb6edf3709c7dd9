// Tests of Status, Result<T> and the TS_RETURN_IF_ERROR / TS_ASSIGN_OR_RETURN macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace tessera {
namespace {

TEST(StatusTest, DefaultIsOk) {
  const Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.kind(), ErrorKind::kOk);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.to_string(), "OK");
}

TEST(StatusTest, FactoriesSetKindAndMessage) {
  EXPECT_EQ(Status::invalid_input("bad").kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(Status::not_found("gone").kind(), ErrorKind::kNotFound);
  EXPECT_EQ(Status::unsupported("later").kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(Status::internal("bug").kind(), ErrorKind::kInternal);
  const Status status = Status::invalid_input("tensor 'w': bad dtype");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "tensor 'w': bad dtype");
  EXPECT_EQ(status.to_string(), "invalid input: tensor 'w': bad dtype");
  EXPECT_EQ(Status(ErrorKind::kOverloaded, "busy").to_string(), "overloaded: busy");
  EXPECT_EQ(Status(ErrorKind::kDisconnected, "peer").to_string(), "disconnected: peer");
}

TEST(StatusTest, OkKindWithMessageIsOk) {
  const Status status(ErrorKind::kOk, "ignored");
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.message(), "");
}

TEST(StatusTest, ErrorKindNames) {
  EXPECT_EQ(error_kind_name(ErrorKind::kOk), "OK");
  EXPECT_EQ(error_kind_name(ErrorKind::kInvalidInput), "invalid input");
  EXPECT_EQ(error_kind_name(ErrorKind::kNotFound), "not found");
  EXPECT_EQ(error_kind_name(ErrorKind::kUnsupported), "unsupported");
  EXPECT_EQ(error_kind_name(ErrorKind::kOverloaded), "overloaded");
  EXPECT_EQ(error_kind_name(ErrorKind::kDisconnected), "disconnected");
  EXPECT_EQ(error_kind_name(ErrorKind::kInternal), "internal error");
}

TEST(StatusTest, WithContextPrefixesAndKeepsKind) {
  const Status status = Status::not_found("tensor 'w'").with_context("model.safetensors");
  EXPECT_EQ(status.kind(), ErrorKind::kNotFound);
  EXPECT_EQ(status.message(), "model.safetensors: tensor 'w'");
  EXPECT_EQ(status.with_context("dir").message(), "dir: model.safetensors: tensor 'w'");
  EXPECT_TRUE(Status().with_context("anything").ok());
}

TEST(StatusTest, CauseIsTypedAndSurvivesContext) {
  EXPECT_EQ(Status().cause(), Cause::kNone);
  EXPECT_EQ(Status::disconnected("peer gone").cause(), Cause::kNone);
  const Status interrupted = Status::disconnected("interrupted", Cause::kInterrupted);
  EXPECT_EQ(interrupted.kind(), ErrorKind::kDisconnected);
  EXPECT_EQ(interrupted.cause(), Cause::kInterrupted);
  EXPECT_EQ(interrupted.to_string(), "disconnected: interrupted");  // the cause adds no words
  const Status closed = Status::disconnected("peer closed the connection after 0 of 4 bytes", Cause::kClosedCleanly);
  EXPECT_EQ(closed.with_context("previous stage").cause(), Cause::kClosedCleanly);
  EXPECT_EQ(closed.with_context("previous stage").message(),
            "previous stage: peer closed the connection after 0 of 4 bytes");
  // The same words without the cause are not the condition: nothing reads it from text.
  EXPECT_EQ(Status::disconnected("interrupted").cause(), Cause::kNone);
  EXPECT_EQ(Status(ErrorKind::kOk, "", Cause::kInterrupted).cause(), Cause::kNone);  // OK has no cause
}

TEST(StatusTest, CopiesAreEqualAndIndependentOfTheOriginal) {
  Status original = Status::internal("x");
  const Status copy = original;
  original = Status();
  EXPECT_TRUE(original.ok());
  EXPECT_EQ(copy.kind(), ErrorKind::kInternal);
  EXPECT_EQ(copy.message(), "x");
}

TEST(ResultTest, HoldsValueOrError) {
  const Result<int> value = 7;
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  EXPECT_TRUE(value.status().ok());

  const Result<int> error = Status::invalid_input("nope");
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(error.status().message(), "nope");
}

TEST(ResultTest, OkStatusBecomesInternalError) {
  const Result<int> result = Status();
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().kind(), ErrorKind::kInternal);
}

TEST(ResultTest, HoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> result = std::make_unique<int>(3);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(**result, 3);
  const std::unique_ptr<int> taken = std::move(result).value();
  EXPECT_EQ(*taken, 3);
  const Result<std::string> text = std::string("abc");
  EXPECT_EQ(text->size(), 3u);
}

Status fail_if(bool fail) { return fail ? Status::not_found("missing") : Status(); }

Result<int> parse_positive(int x) {
  if (x <= 0) return Status::invalid_input("not positive: " + std::to_string(x));
  return x;
}

Status chain(bool fail, int* out) {
  TS_RETURN_IF_ERROR(fail_if(fail));
  *out = 1;
  return {};
}

Result<int> doubled(int x) {
  TS_ASSIGN_OR_RETURN(const int v, parse_positive(x));
  TS_ASSIGN_OR_RETURN(auto w, parse_positive(v + 1));  // two uses in one function
  return v + w - 1;
}

TEST(StatusMacrosTest, ReturnIfErrorPropagates) {
  int out = 0;
  EXPECT_TRUE(chain(false, &out).ok());
  EXPECT_EQ(out, 1);
  out = 0;
  const Status status = chain(true, &out);
  EXPECT_EQ(status.kind(), ErrorKind::kNotFound);
  EXPECT_EQ(out, 0);
}

TEST(StatusMacrosTest, AssignOrReturnPropagates) {
  const Result<int> ok = doubled(4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8);
  const Result<int> error = doubled(-2);
  EXPECT_EQ(error.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(error.status().message(), "not positive: -2");
}

}  // namespace
}  // namespace tessera
