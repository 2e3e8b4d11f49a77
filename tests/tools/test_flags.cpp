// tests/tools/test_flags.cpp: tools/cli/flags.h, the command-line parser of every program.
//
// Each test parses a command line with parse_or_throw (parse() would exit) and checks either the
// values stored or the FlagError's message: the flag, the value given, and what was expected.
#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tools/cli/flags.h"

using ringgrad::cli::FlagError;
using ringgrad::cli::FlagParser;
using ringgrad::cli::Positionals;

namespace {

// A program with one flag of each kind, like the examples.
struct Demo {
  FlagParser flags{"fashion_mnist", "Trains an MLP on Fashion-MNIST."};
  int64_t epochs = 4;
  int nproc = 2;
  uint64_t seed = 7;
  double lr = 0.1;
  std::string out;
  std::string data = "data";
  bool ddp = false;
  std::string impl = "both";

  Demo() {
    flags.add_int("--epochs", &epochs, "passes over the training set", 1, 100000);
    flags.add_int("--nproc", &nproc, "processes", 1, 1024);
    flags.add_int("--seed", &seed, "random seed");
    flags.add_double("--lr", &lr, "learning rate", 0.0, 1e6);
    flags.add_string("--out", &out, "where to write the result").metavar("PATH");
    flags.add_string("--data", &data, "data folder");
    flags.add_bool("--ddp", &ddp, "one process per device");
    flags.add_choice("--impl", &impl, {"native", "cublas", "both"}, "which GEMM");
  }

  std::vector<std::string> parse(std::initializer_list<const char*> words,
                                 Positionals positionals = Positionals::None) {
    std::vector<const char*> argv{"fashion_mnist"};
    argv.insert(argv.end(), words);
    return flags.parse_or_throw(static_cast<int>(argv.size()), argv.data(), positionals);
  }
};

// The message parse_or_throw throws for `words`, or "" if it does not throw.
std::string error_of(std::initializer_list<const char*> words) {
  Demo d;
  try {
    d.parse(words);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("flags: values as --flag value and --flag=value", "[flags]") {
  Demo d;
  CHECK(d.parse({"--epochs", "12", "--lr=0.25", "--out", "run.ckpt", "--ddp", "--impl=cublas", "--nproc", "8", "--seed",
                 "18446744073709551615"})
            .empty());
  CHECK(d.epochs == 12);
  CHECK(d.lr == 0.25);
  CHECK(d.out == "run.ckpt");
  CHECK(d.ddp);
  CHECK(d.impl == "cublas");
  CHECK(d.nproc == 8);
  CHECK(d.seed == UINT64_MAX);
  CHECK(d.flags.was_set("--epochs"));
  CHECK_FALSE(d.flags.was_set("--data"));
  CHECK(d.data == "data");  // untouched flags keep their defaults
}

TEST_CASE("flags: negative numbers and values that start with a dash", "[flags]") {
  FlagParser flags("p");
  int shift = 0;
  double x = 0;
  std::string name;
  flags.add_int("--shift", &shift, "");
  flags.add_double("--x", &x, "");
  flags.add_string("--name", &name, "");
  const char* argv[] = {"p", "--shift", "-3", "--x", "-1.5e-3", "--name=--odd"};
  flags.parse_or_throw(6, argv);
  CHECK(shift == -3);
  CHECK(x == -1.5e-3);
  CHECK(name == "--odd");
}

TEST_CASE("flags: an unknown flag is named once, with the program's name once", "[flags]") {
  CHECK(error_of({"--bogus"}) == "fashion_mnist: unknown flag --bogus");
  CHECK(error_of({"--bogus=3"}) == "fashion_mnist: unknown flag --bogus");
  CHECK(error_of({"-x"}) == "fashion_mnist: unknown flag -x");
  // A near miss suggests the flag that was meant.
  CHECK(error_of({"--epoch", "3"}) == "fashion_mnist: unknown flag --epoch (did you mean --epochs?)");
}

TEST_CASE("flags: a missing value", "[flags]") {
  CHECK(error_of({"--epochs"}) == "fashion_mnist: --epochs needs a value");
  CHECK(error_of({"--out"}) == "fashion_mnist: --out needs a value");
  // An empty value (a variable that expanded to nothing) is refused, not taken as "none".
  CHECK(error_of({"--out", ""}) == "fashion_mnist: --out expects a value, got ''");
  CHECK(error_of({"--data="}) == "fashion_mnist: --data expects a value, got ''");
  // The next word is a flag, not the value: "--out --epochs 3" forgot the path.
  CHECK(error_of({"--out", "--epochs", "3"}) == "fashion_mnist: --out needs a value");
}

TEST_CASE("flags: integers are checked whole, in range, without overflow", "[flags]") {
  const std::string expected = "fashion_mnist: --epochs expects an integer in [1, 100000], got ";
  CHECK(error_of({"--epochs", "3x"}) == expected + "'3x'");    // std::stoll read 3
  CHECK(error_of({"--epochs", "abc"}) == expected + "'abc'");  // std::stoll threw "stoll"
  CHECK(error_of({"--epochs", "0"}) == expected + "'0'");
  CHECK(error_of({"--epochs", "100001"}) == expected + "'100001'");
  CHECK(error_of({"--epochs", ""}) == expected + "''");
  CHECK(error_of({"--epochs", " 3"}) == expected + "' 3'");
  CHECK(error_of({"--epochs", "2.5"}) == expected + "'2.5'");
  CHECK(error_of({"--epochs", "99999999999999999999"}) == expected + "'99999999999999999999'");
  CHECK(error_of({"--nproc", "0"}) == "fashion_mnist: --nproc expects an integer in [1, 1024], got '0'");
  CHECK(error_of({"--nproc", "-1"}) == "fashion_mnist: --nproc expects an integer in [1, 1024], got '-1'");
  // int: a value that fits int64 but not int
  CHECK(error_of({"--nproc", "4294967297"}) ==
        "fashion_mnist: --nproc expects an integer in [1, 1024], got '4294967297'");
  // unsigned: "-1" would wrap around to the largest value
  CHECK(error_of({"--seed", "-1"}) ==
        "fashion_mnist: --seed expects an integer in [0, 18446744073709551615], got '-1'");
}

TEST_CASE("flags: doubles are finite, whole and in range", "[flags]") {
  const std::string expected = "fashion_mnist: --lr expects a number in [0, 1e+06], got ";
  CHECK(error_of({"--lr", "abc"}) == expected + "'abc'");  // std::stod threw "stod"
  CHECK(error_of({"--lr", "0.1x"}) == expected + "'0.1x'");
  CHECK(error_of({"--lr", "nan"}) == expected + "'nan'");
  CHECK(error_of({"--lr", "inf"}) == expected + "'inf'");
  CHECK(error_of({"--lr", "1e999"}) == expected + "'1e999'");  // overflows to inf
  CHECK(error_of({"--lr", "-0.5"}) == expected + "'-0.5'");
  CHECK(error_of({"--lr=2e6"}) == expected + "'2e6'");
  Demo d;
  d.parse({"--lr", "1e-400"});  // underflow is a (tiny) number, not an error
  CHECK(d.lr == 0.0);
}

TEST_CASE("flags: a switch takes no value, a choice names its choices", "[flags]") {
  CHECK(error_of({"--ddp=yes"}) == "fashion_mnist: --ddp is a switch and takes no value, got '--ddp=yes'");
  CHECK(error_of({"--impl", "cuda"}) == "fashion_mnist: --impl expects one of native|cublas|both, got 'cuda'");
}

TEST_CASE("flags: positionals are an error unless the program takes them", "[flags]") {
  CHECK(error_of({"extra"}) ==
        "fashion_mnist: unexpected argument 'extra' (fashion_mnist takes flags only; "
        "--help lists them)");
  CHECK(error_of({"--", "extra"}) ==
        "fashion_mnist: unexpected argument 'extra' (fashion_mnist takes flags only; "
        "--help lists them)");
  {
    Demo d;  // `--` ends the flags: a launcher's program may itself be named like a flag
    CHECK(d.parse({"--nproc", "3", "--", "--epochs", "9"}, Positionals::StopAtFirst) ==
          std::vector<std::string>{"--epochs", "9"});
    CHECK(d.epochs == 4);
  }
  {
    Demo d;  // the first word that is not a flag and everything after it, untouched
    CHECK(d.parse({"--nproc", "3", "./train", "--epochs", "9", "--bogus"}, Positionals::StopAtFirst) ==
          std::vector<std::string>{"./train", "--epochs", "9", "--bogus"});
    CHECK(d.nproc == 3);
    CHECK(d.epochs == 4);
  }
}

TEST_CASE("flags: --help lists every flag with its help and default", "[flags]") {
  Demo d;
  d.parse({"--epochs", "3", "--help", "--bogus"});  // --help wins; the rest is not read
  CHECK(d.flags.help_requested());
  const std::string help = d.flags.help();
  CHECK(help.rfind("usage: fashion_mnist [--epochs N]", 0) == 0);
  CHECK(help.find("Trains an MLP on Fashion-MNIST.") != std::string::npos);
  CHECK(help.find("--epochs N              passes over the training set (1 to 100000; default: 4)") !=
        std::string::npos);
  CHECK(help.find("--lr X                  learning rate (0 to 1e+06; default: 0.1)") != std::string::npos);
  CHECK(help.find("--out PATH              where to write the result (default: none)") != std::string::npos);
  CHECK(help.find("--data S                data folder (default: data)") != std::string::npos);
  CHECK(help.find("--ddp                   one process per device (default: off)") != std::string::npos);
  CHECK(help.find("--impl native|cublas|both\n") != std::string::npos);
  CHECK(help.find("which GEMM (default: both)") != std::string::npos);
  CHECK(help.find("--seed N                random seed (default: 7)") != std::string::npos);
  CHECK(help.find("-h, --help") != std::string::npos);
  // The default shown is the one registered, whatever the command line said.
  CHECK(help.find("default: 3") == std::string::npos);
}

TEST_CASE("flags: canonical() and values() give the effective flags", "[flags]") {
  Demo d;
  d.parse({"--epochs", "12", "--lr", "0.10", "--out", "my run.ckpt", "--ddp"});
  CHECK(d.flags.canonical() ==
        "--epochs 12 --nproc 2 --seed 7 --lr 0.1 --out 'my run.ckpt' --data data --ddp --impl both");
  CHECK(d.flags.value("--lr") == "0.1");
  CHECK(d.flags.value("--ddp") == "true");
  CHECK(d.flags.values().size() == 8);
  CHECK(d.flags.values()[0] == std::pair<std::string, std::string>("--epochs", "12"));
}

TEST_CASE("flags: set() checks a restored value like a typed one", "[flags]") {
  Demo d;
  d.flags.set("--epochs", "9");
  d.flags.set("--ddp", "true");
  CHECK(d.epochs == 9);
  CHECK(d.ddp);
  CHECK_FALSE(d.flags.was_set("--epochs"));
  try {
    d.flags.set("--epochs", "0");
    FAIL("set accepted 0");
  } catch (const FlagError& e) {
    CHECK(std::string(e.what()) == "fashion_mnist: --epochs expects an integer in [1, 100000], got '0'");
  }
}

TEST_CASE("flags: registering a flag wrongly is a programming error", "[flags]") {
  FlagParser flags("p");
  int n = 0;
  std::string s = "x";
  flags.add_int("--n", &n, "");
  CHECK_THROWS_AS(flags.add_int("--n", &n, ""), std::logic_error);
  CHECK_THROWS_AS(flags.add_int("n", &n, ""), std::logic_error);
  CHECK_THROWS_AS(flags.add_choice("--s", &s, {"a", "b"}, ""), std::logic_error);  // default not a choice
  CHECK_THROWS_AS(flags.was_set("--m"), std::logic_error);
}

TEST_CASE("flags: lists and custom flags are checked like the others", "[flags]") {
  FlagParser flags("bench");
  std::vector<int> threads = {1, 2};
  std::vector<double> caps = {25};
  int64_t bytes = 1024;
  flags.add_list("--threads", &threads, "thread counts", 1, 4096);
  flags.add_list("--caps", &caps, "bucket caps in MB", 0.0, 1e6);
  flags.add_custom(
      "--max-bytes", "B", "largest size", "a byte count such as 4096, 64K, 256M or 1G",
      [&bytes](const std::string& text) {
        const int64_t scale = text.empty() ? 1 : text.back() == 'K' ? 1 << 10 : text.back() == 'M' ? 1 << 20 : 1;
        const auto v = ringgrad::cli::parse_integer<int64_t>(scale == 1 ? text : text.substr(0, text.size() - 1));
        if (!v || *v < 1) return false;
        bytes = *v * scale;
        return true;
      },
      [&bytes] { return std::to_string(bytes); });
  const char* argv[] = {"bench", "--threads", "1,2,4", "--caps=0.5,100", "--max-bytes", "64M"};
  flags.parse_or_throw(6, argv);
  CHECK(threads == std::vector<int>{1, 2, 4});
  CHECK(caps == std::vector<double>{0.5, 100});
  CHECK(bytes == 64 << 20);
  CHECK(flags.canonical() == "--threads 1,2,4 --caps 0.5,100 --max-bytes 67108864");
  CHECK(flags.help().find("--threads N,N,...       thread counts (each 1 to 4096; default: 1,2)") != std::string::npos);
  CHECK(flags.help().find("largest size (default: 1024)") != std::string::npos);

  auto error = [&flags](const char* flag, const char* value) -> std::string {
    const char* words[] = {"bench", flag, value};
    try {
      flags.parse_or_throw(3, words);
    } catch (const FlagError& e) {
      return e.what();
    }
    return "";
  };
  const std::string list = "bench: --threads expects a comma-separated list of integers in [1, 4096], got ";
  CHECK(error("--threads", "1,,2") == list + "'1,,2'");
  CHECK(error("--threads", "") == list + "''");
  CHECK(error("--threads", "1,0") == list + "'1,0'");
  CHECK(error("--threads", "1,2x") == list + "'1,2x'");
  CHECK(error("--caps", "1,nan") ==
        "bench: --caps expects a comma-separated list of numbers in [0, 1e+06], got '1,nan'");
  CHECK(error("--max-bytes", "64Q") ==
        "bench: --max-bytes expects a byte count such as 4096, 64K, 256M or 1G, got '64Q'");
  CHECK(threads == std::vector<int>{1, 2, 4});  // a rejected value leaves the flag as it was
}
