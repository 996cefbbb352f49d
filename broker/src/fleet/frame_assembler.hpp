#pragma once
// Reassembly of a rig's frames. The transport reads at most its receive buffer
// (--ws-rx-buffer-bytes, 128 by default) per wakeup, so a frame larger than that
// arrives in pieces; the common case, a whole frame in one piece, is passed
// through without a copy. Nothing is held between frames (idle rigs dominate a
// fleet's memory). Pure.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace fleetlink::broker {

class FrameAssembler {
 public:
  enum class Status : std::uint8_t {
    complete,   // `frame` is a whole frame
    partial,    // more pieces follow
    too_large,  // the frame would exceed max_frame_bytes: close 1009 (what was held is dropped)
  };
  struct Piece {
    Status status = Status::partial;
    std::span<const std::uint8_t> frame;           // complete only; valid while `owner` (or the input) lives
    std::unique_ptr<std::vector<std::uint8_t>> owner;  // set when the frame was assembled from pieces
  };

  // `data`: what the transport read; `remaining`: bytes it says still follow in
  // this frame; `final`: the frame's last piece.
  Piece add(std::span<const std::uint8_t> data, std::size_t remaining, bool final, std::size_t max_frame_bytes);
  bool holding() const noexcept { return partial_ != nullptr; }

 private:
  std::unique_ptr<std::vector<std::uint8_t>> partial_;  // null between frames
};

}  // namespace fleetlink::broker
