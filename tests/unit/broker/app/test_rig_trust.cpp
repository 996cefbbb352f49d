// The pure part of loading the rig listener's trust (net/rig_trust.hpp): which
// files of a --crl directory are read. Loading itself is tested with real
// certificates and CRLs in tests/integration/test_broker_reload.py.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "net/rig_trust.hpp"

using fleetlink::broker::crl_listing;
using fleetlink::broker::CrlListing;
using V = std::vector<std::string>;

TEST_CASE("crl directory: *.pem, *.crl and c_rehash links are read, sorted; everything else skipped") {
  const CrlListing l = crl_listing({"lab.pem", "README", "b.crl", "0a1b2c3d.r0", "0A1B2C3D.r12", ".hidden.pem",
                                    "old.pem.bak", "lab.pem~", "0a1b2c3d.0", "0a1b2c3d.r", "0a1b2c3x.r0", ".pem",
                                    "ca.crt", "z.PEM"});
  CHECK(l.read == V{"0A1B2C3D.r12", "0a1b2c3d.r0", "b.crl", "lab.pem"});
  CHECK(l.skipped == V{".hidden.pem", ".pem", "0a1b2c3d.0", "0a1b2c3d.r", "0a1b2c3x.r0", "README", "ca.crt",
                       "lab.pem~", "old.pem.bak", "z.PEM"});
}

TEST_CASE("crl directory: an empty one reads nothing") {
  const CrlListing l = crl_listing({});
  CHECK(l.read.empty());
  CHECK(l.skipped.empty());
}
