// RandAugment / TrivialAugmentWide: every op equals torchvision's own application (_apply_op on uint8 tensors,
// what both transforms call) pixel for pixel, the magnitude tables equal torchvision's, and the draws have
// torchvision's distribution and depend on (seed, epoch, index) only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/auto_augment.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

class AutoAugment : public test::FixtureSuite {
 protected:
  static void SetUpTestSuite() { load_fixtures("auto_augment", "tests/data/make_auto_augment.py", ""); }
  static nlohmann::json meta() {
    std::ifstream f(fixture_path("aa_meta.json"));
    return nlohmann::json::parse(f);
  }
  static torch::Tensor load_u8(const std::string& file, std::vector<int64_t> shape) {
    const std::string b = test::read_file(fixture_path(file));
    return torch::from_blob(const_cast<char*>(b.data()), shape, torch::kUInt8).to(torch::kFloat32);  // a copy
  }
  static AutoOp op_named(const std::string& name) {
    for (int k = 0; k < static_cast<int>(AutoOp::count); ++k)
      if (name == auto_op_name(static_cast<AutoOp>(k))) return static_cast<AutoOp>(k);
    ADD_FAILURE() << "unknown op " << name;
    return AutoOp::identity;
  }
};

TEST_F(AutoAugment, EveryOpEqualsTorchvisionPixelForPixel) {
  const auto m = meta();
  auto shape = m["shape"].get<std::vector<int64_t>>();
  const torch::Tensor x = load_u8("aa_in.u8", shape);
  const auto& cases = m["cases"];
  std::vector<int64_t> out_shape = {static_cast<int64_t>(cases.size())};
  out_shape.insert(out_shape.end(), shape.begin(), shape.end());
  const torch::Tensor want = load_u8("aa_out.u8", out_shape);
  std::map<std::string, int> seen;
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::string name = cases[c]["op"];
    const double mag = cases[c]["magnitude"];
    const torch::Tensor got = apply_auto_op(x, op_named(name), std::vector<double>(static_cast<size_t>(shape[0]), mag));
    const torch::Tensor diff = (got - want[static_cast<int64_t>(c)]).abs();
    const int64_t wrong = (diff > 0).sum().item<int64_t>();
    EXPECT_EQ(wrong, 0) << name << " magnitude " << mag << ": " << wrong << " of " << diff.numel()
                        << " values differ, max by " << diff.max().item<double>();
    ++seen[name];
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(AutoOp::count)) << "every op has a case";
  // posterize 4 bits, solarize at 0 (all inverted) and large shears/rotations are among the cases
  EXPECT_GE(seen["Rotate"], 8);
}

TEST_F(AutoAugment, MagnitudeTablesEqualTorchvisions) {
  const auto m = meta();
  const int64_t H = m["H"], W = m["W"];
  for (const std::string policy : {"rand", "trivial"}) {
    const auto& t = m["tables"][policy];
    for (int k = 0; k < static_cast<int>(AutoOp::count); ++k) {
      const auto op = static_cast<AutoOp>(k);
      const auto& entry = t[auto_op_name(op)];
      const auto values = entry[0].get<std::vector<double>>();
      const bool want_signed = entry[1];
      for (int bin = 0; bin < 31; ++bin) {
        bool sign = false;
        const double got = auto_augment_magnitude(policy, op, bin, 31, H, W, &sign);
        const double want = values.empty() ? 0.0 : values[static_cast<size_t>(bin)];
        EXPECT_EQ(got, want) << policy << " " << auto_op_name(op) << " bin " << bin;
        EXPECT_EQ(sign, want_signed && !values.empty()) << policy << " " << auto_op_name(op);
      }
    }
  }
  EXPECT_THROW(auto_augment_magnitude("rand", AutoOp::rotate, 31, 31, H, W), Error);
  EXPECT_THROW(auto_augment_magnitude("autoaugment", AutoOp::rotate, 3, 31, H, W), Error);
}

TEST(AutoAugmentDraws, DistributionAndDeterminism) {
  AutoAugmentOptions rand;
  rand.policy = "rand";
  rand.num_ops = 2;
  rand.magnitude = 9;
  AutoAugmentOptions trivial;
  trivial.policy = "trivial";
  const int N = 14000;
  std::vector<int> ops(14, 0), bins(31, 0);
  int negative = 0, signed_draws = 0;
  for (int i = 0; i < N; ++i) {
    const auto d = draw_auto_augment(rand, 5, 2, i, 224, 224);
    ASSERT_EQ(d.n, 2);
    for (int k = 0; k < 2; ++k) {
      ++ops[static_cast<size_t>(d.op[k])];
      bool sign = false;
      const double mag = auto_augment_magnitude("rand", d.op[k], 9, 31, 224, 224, &sign);
      EXPECT_EQ(std::abs(d.magnitude[k]), std::abs(mag)) << "RandAugment uses its fixed magnitude bin";
      if (sign && mag != 0) {
        ++signed_draws;
        negative += d.magnitude[k] < 0;
      }
    }
    const auto t = draw_auto_augment(trivial, 5, 2, i, 224, 224);
    ASSERT_EQ(t.n, 1);
    if (t.op[0] == AutoOp::rotate) {  // bins are uniform: recover the bin from |magnitude| = 135 * bin / 30
      const int bin = static_cast<int>(std::lround(std::abs(t.magnitude[0]) / 4.5));
      ASSERT_GE(bin, 0);
      ASSERT_LT(bin, 31);
      ++bins[static_cast<size_t>(bin)];
    }
    // the same (seed, epoch, index) gives the same draw; another epoch another
    const auto again = draw_auto_augment(rand, 5, 2, i, 224, 224);
    EXPECT_TRUE(again.op[0] == d.op[0] && again.op[1] == d.op[1] && again.magnitude[0] == d.magnitude[0]);
  }
  for (int k = 0; k < 14; ++k) EXPECT_NEAR(ops[static_cast<size_t>(k)] / (2.0 * N), 1.0 / 14, 0.01) << "op " << k;
  EXPECT_NEAR(static_cast<double>(negative) / signed_draws, 0.5, 0.02);
  int rot = 0;
  for (int b : bins) rot += b;
  ASSERT_GT(rot, 700);
  for (int b = 0; b < 31; ++b) EXPECT_NEAR(bins[static_cast<size_t>(b)] / static_cast<double>(rot), 1.0 / 31, 0.02);
  int differ = 0;
  for (int i = 0; i < 200; ++i) differ += draw_auto_augment(rand, 5, 3, i, 224, 224).op[0] != draw_auto_augment(rand, 5, 2, i, 224, 224).op[0];
  EXPECT_GT(differ, 150);
}

// The batched application (samples grouped by op) equals applying each sample's ops one by one.
TEST(AutoAugmentDraws, BatchedEqualsPerSample) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randint(0, 256, {24, 3, 20, 23}).to(torch::kFloat32);
  AutoAugmentOptions o;
  o.policy = "rand";
  o.num_ops = 3;
  o.magnitude = 15;
  std::vector<AutoAugmentDraw> draws;
  for (int i = 0; i < 24; ++i) draws.push_back(draw_auto_augment(o, 1, 0, i, 20, 23));
  torch::Tensor batched = x.clone();
  auto_augment_(batched, draws);
  for (int64_t i = 0; i < 24; ++i) {
    torch::Tensor one = x.narrow(0, i, 1).clone();
    for (int k = 0; k < draws[static_cast<size_t>(i)].n; ++k)
      one = apply_auto_op(one, draws[static_cast<size_t>(i)].op[k], {draws[static_cast<size_t>(i)].magnitude[k]});
    EXPECT_TRUE(torch::equal(one[0], batched[i])) << "sample " << i;
  }
  EXPECT_FALSE(torch::equal(batched, x));
  EXPECT_TRUE(torch::equal(batched, batched.round())) << "values stay integers (uint8 semantics)";
  EXPECT_GE(batched.min().item<double>(), 0.0);
  EXPECT_LE(batched.max().item<double>(), 255.0);
}

}  // namespace
}  // namespace trainer
