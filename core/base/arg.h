/// @file
/// core/base/arg.h: RINGGRAD_ARG, the one way an options type spells a setting.
///
/// Every options type in ringgrad (SGDOptions, DataLoaderOptions, InitOptions, DDPOptions, ...) is
/// written the way PyTorch's C++ frontend writes its own with TORCH_ARG: a setting `momentum` is a
/// private field `momentum_` with a chainable setter and a getter, both named `momentum`:
///
/// @code
///   auto options = nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true);  // set, chained
///   double m = options.momentum();                                          // read
///   options.momentum() = 0.5;                                               // or change in place
/// @endcode
///
/// Settings a type cannot do without (SGD's learning rate, Linear's sizes) are constructor arguments;
/// every other one starts at the default written beside its RINGGRAD_ARG line:
///
/// @code
///   struct SGDOptions {
///     explicit SGDOptions(double lr) : lr_(lr) {}
///     RINGGRAD_ARG(double, lr);
///     RINGGRAD_ARG(double, momentum) = 0.0;
///   };
/// @endcode
///
/// A setting whose setter must do more than store the value (DataLoaderOptions::normalize sets three)
/// is written out by hand in the same shape: a setter returning *this and a const getter.
#pragma once

#include <utility>

// NOLINTBEGIN(bugprone-macro-parentheses): T is a type, and `(T)&` or `(T)&&` would not compile.
/// Declares the setting `name` of type `T`: a chainable setter `name(value)`, the getters
/// `name() const` and `name()` (a reference, to change it in place), and the private field `name_`.
/// Follow it with `= default_value;`, or with just `;` when a constructor sets it or when T's own
/// default is the setting's (an empty std::string, an empty std::optional).
#define RINGGRAD_ARG(T, name)                              \
 public:                                                   \
  auto name(const T& new_##name)->decltype(*this) {        \
    this->name##_ = new_##name;                            \
    return *this;                                          \
  }                                                        \
  auto name(T&& new_##name)->decltype(*this) {             \
    this->name##_ = std::move(new_##name);                 \
    return *this;                                          \
  }                                                        \
  const T& name() const noexcept { return this->name##_; } \
  T& name() noexcept { return this->name##_; }             \
                                                           \
 private:                                                  \
  T name##_
// NOLINTEND(bugprone-macro-parentheses)
