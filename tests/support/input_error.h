#pragma once
// The message of the InputError `f` throws; a test failure when it throws none.
#include <functional>
#include <string>

#include <boost/test/unit_test.hpp>

#include "pipewright/error.h"

namespace pw::test {

inline std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const pw::InputError& e) {
    return e.what();
  }
  BOOST_FAIL("expected an InputError");
  return {};
}

}  // namespace pw::test
