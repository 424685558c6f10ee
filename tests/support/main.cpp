// The one Boost.Test main every pipewright test executable links.
#define BOOST_TEST_MODULE pipewright
#include <boost/test/unit_test.hpp>
