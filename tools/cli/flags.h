// tools/cli/flags.h: the command-line parser every ringgrad program uses (examples, benchmarks,
// ringrun), so that all of them read flags the same way and say the same things when a flag is wrong.
//
//   ringgrad::cli::FlagParser flags("fashion_mnist", "Trains an MLP on Fashion-MNIST.");
//   int64_t epochs = 15;
//   flags.add_int("--epochs", &epochs, "passes over the training set", 1, 100000);
//   flags.parse(argc, argv);  // on a bad flag: prints why and the usage line, exits 2
//
// Accepted: `--flag value`, `--flag=value`, `--` to end the flags; `-h`/`--help` prints every flag
// with its default and exits 0. Every value is checked where it is read -- the whole word must be a
// number (no "3x"), within the flag's range, finite -- so that a mistake is reported against the
// flag that caused it, not by whatever code the value would have reached.
//
// Header-only and free of the ringgrad library: ringrun uses it and links nothing else.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ringgrad::cli {

// A bad command line. what() is the whole message, starting with the program's name.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What parse() does with words that are not flags.
enum class Positionals {
  None,         // a program that takes flags only: any other word is an error
  StopAtFirst,  // a launcher (ringrun): the first non-flag word and everything after it are returned untouched
};

}  // namespace ringgrad::cli

namespace ringgrad::detail {

template <typename T>
struct NonDeduced {
  using type = T;
};

// The shortest text that reads back as the same double: "0.1", not "0.10000000000000001".
inline std::string format_double(double v) {
  char buffer[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  return buffer;
}

template <typename Int>
std::optional<Int> parse_integer(const std::string& text) {
  // strtoll skips leading blanks and accepts an empty number: check the first character ourselves.
  if (text.empty()) return std::nullopt;
  const char c = text[0];
  if (!(c == '-' || c == '+' || (c >= '0' && c <= '9'))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  if constexpr (std::is_signed_v<Int>) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno == ERANGE || end == text.c_str() || *end != '\0') return std::nullopt;
    if (v < static_cast<long long>(std::numeric_limits<Int>::min()) ||
        v > static_cast<long long>(std::numeric_limits<Int>::max()))
      return std::nullopt;
    return static_cast<Int>(v);
  } else {
    if (c == '-') return std::nullopt;  // strtoull would wrap "-1" around to the largest value
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (errno == ERANGE || end == text.c_str() || *end != '\0') return std::nullopt;
    if (v > static_cast<unsigned long long>(std::numeric_limits<Int>::max())) return std::nullopt;
    return static_cast<Int>(v);
  }
}

inline std::optional<double> parse_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const char c = text[0];
  if (!(c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9'))) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // Overflow gives +-inf, which isfinite rejects; underflow gives a tiny or zero value, which is fine.
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A word as a shell would need it written: bare when it is safe, else in single quotes.
inline std::string shell_quote(const std::string& word) {
  bool safe = !word.empty();
  for (char c : word)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string("_-+=./,:@%").find(c) != std::string::npos))
      safe = false;
  if (safe) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace ringgrad::detail

namespace ringgrad::cli {

// For add_custom's parsers: the whole text as a number, or nullopt ("3x", "", overflow, NaN, inf).
using detail::parse_double;
using detail::parse_integer;

// One registered flag. add_* return it so that a call can refine how --help shows it:
//   flags.add_string("--save", &path, "write a checkpoint after every epoch").metavar("PATH");
class Flag {
 public:
  Flag& metavar(std::string m) {
    metavar_ = std::move(m);
    return *this;
  }
  // Shown in --help instead of the value the target held when the flag was added, e.g. for a
  // default that depends on another flag: "0.05 for sgd, 0.001 for adamw".
  Flag& default_text(std::string text) {
    default_text_ = std::move(text);
    return *this;
  }

 private:
  friend class FlagParser;
  std::string name_, help_, metavar_, default_text_;
  std::string expected_;  // "an integer in [1, 100000]": completes "--epochs expects ..."
  std::string range_;     // "1 to 100000", shown in --help; empty when the type's own limits apply
  bool is_switch_ = false;
  bool set_ = false;                                // given on the command line
  std::function<bool(const std::string&)> assign_;  // parses and stores; false when the text is not acceptable
  std::function<std::string()> value_;              // the current value as text, as the flag would accept it
};

class FlagParser {
 public:
  // program: the name errors start with. summary: one or two sentences for --help. usage_tail: what
  // follows the flags in the usage line, e.g. "prog [args...]".
  explicit FlagParser(std::string program, std::string summary = "", std::string usage_tail = "")
      : program_(std::move(program)), summary_(std::move(summary)), usage_tail_(std::move(usage_tail)) {}

  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  // Text printed after the list of flags in --help (environment variables, exit statuses, ...).
  void set_epilogue(std::string text) { epilogue_ = std::move(text); }

  // An integer flag of any integral type; min and max are inclusive.
  template <typename Int>
  Flag& add_int(const std::string& name, Int* target, std::string help,
                typename detail::NonDeduced<Int>::type min = std::numeric_limits<Int>::lowest(),
                typename detail::NonDeduced<Int>::type max = std::numeric_limits<Int>::max()) {
    static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>, "add_int takes an integer; see add_bool");
    Flag& f = add(name, std::move(help), "N", std::to_string(*target));
    f.expected_ = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    if (min != std::numeric_limits<Int>::lowest() || max != std::numeric_limits<Int>::max())
      f.range_ = std::to_string(min) + " to " + std::to_string(max);
    f.assign_ = [target, min, max](const std::string& text) {
      const std::optional<Int> v = detail::parse_integer<Int>(text);
      if (!v || *v < min || *v > max) return false;
      *target = *v;
      return true;
    };
    f.value_ = [target] { return std::to_string(*target); };
    return f;
  }

  // A finite floating-point flag; min and max are inclusive. NaN and infinities are never accepted.
  Flag& add_double(const std::string& name, double* target, std::string help,
                   double min = -std::numeric_limits<double>::infinity(),
                   double max = std::numeric_limits<double>::infinity()) {
    Flag& f = add(name, std::move(help), "X", detail::format_double(*target));
    const bool low = std::isfinite(min), high = std::isfinite(max);
    using detail::format_double;
    f.expected_ = low && high ? "a number in [" + format_double(min) + ", " + format_double(max) + "]"
                  : low       ? "a number >= " + format_double(min)
                  : high      ? "a number <= " + format_double(max)
                              : std::string("a finite number");
    f.range_ = low && high ? format_double(min) + " to " + format_double(max)
               : low       ? "at least " + format_double(min)
               : high      ? "at most " + format_double(max)
                           : "";
    f.assign_ = [target, min, max](const std::string& text) {
      const std::optional<double> v = detail::parse_double(text);
      if (!v || *v < min || *v > max) return false;
      *target = *v;
      return true;
    };
    f.value_ = [target] { return detail::format_double(*target); };
    return f;
  }

  // Any text. --help shows default_text if given, else the target's value, else "none".
  Flag& add_string(const std::string& name, std::string* target, std::string help, std::string default_text = "") {
    Flag& f = add(name, std::move(help), "S", default_text.empty() ? *target : default_text);
    // Never empty: `--save ""` or `--dp "$DEVICES"` with an unset variable is a mistake, and taking it
    // as "no file" or "no devices" would silently run something else than what was asked.
    f.expected_ = "a value";
    f.assign_ = [target](const std::string& text) {
      if (text.empty()) return false;
      *target = text;
      return true;
    };
    f.value_ = [target] { return *target; };
    return f;
  }

  // A switch: present means true. It takes no value (`--ddp=yes` is an error).
  Flag& add_bool(const std::string& name, bool* target, std::string help) {
    Flag& f = add(name, std::move(help), "", *target ? "on" : "off");
    f.is_switch_ = true;
    f.expected_ = "true or false";  // only through set(): the command line has no way to say false
    f.assign_ = [target](const std::string& text) {
      if (text != "true" && text != "false") return false;
      *target = text == "true";
      return true;
    };
    f.value_ = [target] { return std::string(*target ? "true" : "false"); };
    return f;
  }

  // One of a fixed list of words.
  Flag& add_choice(const std::string& name, std::string* target, std::vector<std::string> choices, std::string help) {
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "" : "|") + c;
    bool known = target->empty();
    for (const std::string& c : choices) known = known || c == *target;
    if (!known) throw std::logic_error("add_choice " + name + ": the default '" + *target + "' is not one of " + list);
    Flag& f = add(name, std::move(help), list, *target);
    f.expected_ = "one of " + list;
    f.assign_ = [target, choices](const std::string& text) {
      for (const std::string& c : choices)
        if (c == text) {
          *target = text;
          return true;
        }
      return false;
    };
    f.value_ = [target] { return *target; };
    return f;
  }

  // A comma-separated list of integers or of finite numbers, each in [min, max]: "--threads 1,2,4".
  // An empty list or an empty item ("1,,2") is an error.
  template <typename T>
  Flag& add_list(const std::string& name, std::vector<T>* target, std::string help,
                 typename detail::NonDeduced<T>::type min = std::numeric_limits<T>::lowest(),
                 typename detail::NonDeduced<T>::type max = std::numeric_limits<T>::max()) {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "add_list takes numbers");
    auto text_of = [](T v) {
      if constexpr (std::is_integral_v<T>)
        return std::to_string(v);
      else
        return detail::format_double(static_cast<double>(v));
    };
    auto join = [text_of](const std::vector<T>& values) {
      std::string out;
      for (T v : values) out += (out.empty() ? "" : ",") + text_of(v);
      return out;
    };
    Flag& f = add(name, std::move(help), std::is_integral_v<T> ? "N,N,..." : "X,X,...", join(*target));
    const bool bounded = min != std::numeric_limits<T>::lowest() || max != std::numeric_limits<T>::max();
    f.expected_ = std::string("a comma-separated list of ") + (std::is_integral_v<T> ? "integers" : "numbers") +
                  (bounded ? " in [" + text_of(min) + ", " + text_of(max) + "]" : "");
    if (bounded) f.range_ = "each " + text_of(min) + " to " + text_of(max);
    f.assign_ = [target, min, max](const std::string& text) {
      std::vector<T> values;
      size_t begin = 0;
      for (;;) {
        const size_t comma = text.find(',', begin);
        const std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
        std::optional<T> v;
        if constexpr (std::is_integral_v<T>)
          v = detail::parse_integer<T>(item);
        else if (const std::optional<double> d = detail::parse_double(item))
          v = static_cast<T>(*d);
        if (!v || *v < min || *v > max) return false;
        values.push_back(*v);
        if (comma == std::string::npos) break;
        begin = comma + 1;
      }
      *target = std::move(values);
      return true;
    };
    f.value_ = [target, join] { return join(*target); };
    return f;
  }

  // A flag of any other form ("--shape M,N,K", "--max-bytes 64M"). parse stores the value and
  // returns true, or returns false when the text is not acceptable -- the error then reads
  // "<name> expects <expected>, got '<text>'". value gives the current value as parse would accept it.
  Flag& add_custom(const std::string& name, std::string metavar, std::string help, std::string expected,
                   std::function<bool(const std::string&)> parse, std::function<std::string()> value) {
    Flag& f = add(name, std::move(help), std::move(metavar), value());
    f.expected_ = std::move(expected);
    f.assign_ = std::move(parse);
    f.value_ = std::move(value);
    return f;
  }

  // Parses argv[1..argc), storing each flag's value in its target. With Positionals::None returns
  // nothing (a non-flag word is an error); with StopAtFirst returns the first non-flag word (or the
  // words after `--`) and everything after it. --help: help_requested() becomes true and the rest of
  // the line is ignored. Throws FlagError; parse() below prints it and exits instead.
  std::vector<std::string> parse_or_throw(int argc, const char* const* argv,
                                          Positionals positionals = Positionals::None) {
    help_requested_ = false;
    int i = 1;
    for (; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--") {
        ++i;
        break;
      }
      if (arg == "-h" || arg == "--help") {
        help_requested_ = true;
        return {};
      }
      if (arg.size() < 2 || arg[0] != '-') {  // the first positional word
        if (positionals == Positionals::StopAtFirst) break;
        fail("unexpected argument '" + arg + "' (" + program_ + " takes flags only; --help lists them)");
      }
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(0, eq);
      Flag* f = find(name);
      if (f == nullptr) fail("unknown flag " + name + suggestion(name));
      if (f->is_switch_) {
        if (eq != std::string::npos) fail(name + " is a switch and takes no value, got '" + arg + "'");
        f->assign_("true");
        f->set_ = true;
        continue;
      }
      std::string value;
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else {
        // "--save --epochs 3" forgot the path: a word that looks like a flag is not taken as a value
        // (write --save=--odd-name to mean one).
        if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) fail(name + " needs a value");
        value = argv[++i];
      }
      if (!f->assign_(value)) fail(name + " expects " + f->expected_ + ", got '" + value + "'");
      f->set_ = true;
    }
    std::vector<std::string> rest(argv + i, argv + argc);
    if (positionals == Positionals::None && !rest.empty())
      fail("unexpected argument '" + rest[0] + "' (" + program_ + " takes flags only; --help lists them)");
    return rest;
  }

  // parse_or_throw for main(): a bad command line prints the error and the usage line to stderr and
  // exits with status 2; --help prints help() to stdout and exits with status 0.
  std::vector<std::string> parse(int argc, const char* const* argv, Positionals positionals = Positionals::None) {
    try {
      std::vector<std::string> rest = parse_or_throw(argc, argv, positionals);
      if (help_requested_) {
        std::fputs(help().c_str(), stdout);
        std::exit(0);
      }
      return rest;
    } catch (const FlagError& e) {
      std::fprintf(stderr, "%s\n%s", e.what(), usage().c_str());
      std::exit(2);
    }
  }
  std::vector<std::string> parse(int argc, char** argv, Positionals positionals = Positionals::None) {
    return parse(argc, const_cast<const char* const*>(argv), positionals);
  }

  // For a check across flags after parse(): prints "<program>: <message>" and the usage line to
  // stderr, as a bad flag does, and exits with status 2.
  [[noreturn]] void exit_with_usage(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n%s", program_.c_str(), message.c_str(), usage().c_str());
    std::exit(2);
  }

  bool help_requested() const { return help_requested_; }

  // Whether the flag was given on the command line (not merely left at, or set() to, a value).
  bool was_set(const std::string& name) const { return get(name).set_; }

  // The flag's current value as text it would accept: "15", "0.1", "true".
  std::string value(const std::string& name) const { return get(name).value_(); }

  // Stores a value as if from the command line, checked the same way (for a value restored from a
  // checkpoint); was_set() does not change. Throws FlagError naming the flag.
  void set(const std::string& name, const std::string& text) {
    Flag& f = get(name);
    if (!f.assign_(text)) fail(name + " expects " + f.expected_ + ", got '" + text + "'");
  }

  // Every flag's name and current value(), in the order they were added.
  std::vector<std::pair<std::string, std::string>> values() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& f : flags_) out.emplace_back(f->name_, f->value_());
    return out;
  }

  // The effective command line: "--epochs 4 --lr 0.1 --ddp". Switches that are off and empty
  // strings are left out (the command line cannot say them); values are quoted for a shell.
  std::string canonical() const {
    std::string line;
    for (const auto& f : flags_) {
      const std::string v = f->value_();
      if (f->is_switch_ ? v != "true" : v.empty()) continue;
      line += (line.empty() ? "" : " ") + f->name_;
      if (!f->is_switch_) line += " " + detail::shell_quote(v);
    }
    return line;
  }

  // "usage: prog [--epochs N] [--lr X] ... tail\n", wrapped to 100 columns.
  std::string usage() const {
    std::vector<std::string> words;
    for (const auto& f : flags_) words.push_back("[" + f->name_ + (f->is_switch_ ? "" : " " + f->metavar_) + "]");
    if (!usage_tail_.empty()) words.push_back(usage_tail_);
    const std::string head = "usage: " + program_;
    std::string out = head, line = head;
    for (const std::string& w : words) {
      if (line.size() + 1 + w.size() > 100 && line.size() > head.size()) {
        out += "\n" + std::string(head.size(), ' ');
        line = std::string(head.size(), ' ');
      }
      out += " " + w;
      line += " " + w;
    }
    return out + "\n";
  }

  // What --help prints: usage, summary, then one line per flag with its help, range and default.
  std::string help() const {
    std::string out = usage();
    if (!summary_.empty()) out += "\n" + summary_ + "\n";
    out += "\nflags:\n";
    for (const auto& f : flags_) {
      std::string left = "  " + f->name_ + (f->is_switch_ ? "" : " " + f->metavar_);
      std::string right = f->help_;
      std::string notes;
      if (!f->range_.empty()) notes += f->range_ + "; ";
      notes += "default: " + (f->default_text_.empty() ? std::string("none") : f->default_text_);
      right += (right.empty() ? "(" : " (") + notes + ")";
      constexpr size_t kColumn = 26;
      if (left.size() + 2 > kColumn)
        out += left + "\n" + std::string(kColumn, ' ') + right + "\n";
      else
        out += left + std::string(kColumn - left.size(), ' ') + right + "\n";
    }
    out += "  -h, --help              print this and exit\n";
    if (!epilogue_.empty()) out += "\n" + epilogue_ + (epilogue_.back() == '\n' ? "" : "\n");
    return out;
  }

  const std::string& program() const { return program_; }

  // Throws FlagError("<program>: <message>"): for checks across flags that main() makes after parse,
  // so that they read like the parser's own ("--dp and --ddp are alternatives, got both").
  [[noreturn]] void fail(const std::string& message) const { throw FlagError(program_ + ": " + message); }

 private:
  Flag& add(const std::string& name, std::string help, std::string metavar, std::string default_text) {
    if (name.size() < 3 || name.rfind("--", 0) != 0 || name.find('=') != std::string::npos)
      throw std::logic_error("FlagParser: a flag is named --word, got '" + name + "'");
    if (name == "--help" || find(name) != nullptr) throw std::logic_error("FlagParser: " + name + " added twice");
    flags_.push_back(std::unique_ptr<Flag>(new Flag()));
    Flag& f = *flags_.back();
    f.name_ = name;
    f.help_ = std::move(help);
    f.metavar_ = std::move(metavar);
    f.default_text_ = std::move(default_text);
    return f;
  }

  Flag* find(const std::string& name) const {
    for (const auto& f : flags_)
      if (f->name_ == name) return f.get();
    return nullptr;
  }

  Flag& get(const std::string& name) const {
    Flag* f = find(name);
    if (f == nullptr) throw std::logic_error("FlagParser: no flag " + name);
    return *f;
  }

  // " (did you mean --epochs?)" for a near miss such as --epoch or --epcohs.
  std::string suggestion(const std::string& name) const {
    const Flag* best = nullptr;
    size_t best_distance = 3;  // more than two edits away is not a typo
    for (const auto& f : flags_) {
      const size_t d = detail::edit_distance(name, f->name_);
      if (d < best_distance) best = f.get(), best_distance = d;
    }
    return best ? " (did you mean " + best->name_ + "?)" : "";
  }

  std::string program_, summary_, usage_tail_, epilogue_;
  std::vector<std::unique_ptr<Flag>> flags_;
  bool help_requested_ = false;
};

}  // namespace ringgrad::cli
