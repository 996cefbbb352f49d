#include "fleet/outbound.hpp"

namespace fleetlink::broker {

const char* to_string(OutboundKind k) noexcept {
  switch (k) {
    case OutboundKind::none: return "none";
    case OutboundKind::ping: return "ping";
    case OutboundKind::welcome: return "welcome";
    case OutboundKind::cancel: return "cancel";
    case OutboundKind::command: return "command";
    case OutboundKind::goaway: return "goaway";
  }
  return "none";
}

OutboundKind next_outbound(const OutboundFlags& f, bool has_unsent_command) noexcept {
  if (f.ping) return OutboundKind::ping;
  if (f.welcome) return OutboundKind::welcome;
  if (f.cancels) return OutboundKind::cancel;
  if (has_unsent_command) return OutboundKind::command;
  if (f.goaway) return OutboundKind::goaway;
  return OutboundKind::none;
}

}  // namespace fleetlink::broker
