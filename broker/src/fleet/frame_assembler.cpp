#include "fleet/frame_assembler.hpp"

#include <algorithm>

namespace fleetlink::broker {

FrameAssembler::Piece FrameAssembler::add(std::span<const std::uint8_t> data, std::size_t remaining, bool final,
                                          std::size_t max_frame_bytes) {
  Piece piece;
  if (!partial_ && final) {
    piece.status = Status::complete;
    piece.frame = data;
    return piece;
  }
  if (!partial_) {
    partial_ = std::make_unique<std::vector<std::uint8_t>>();
    partial_->reserve(std::min(data.size() + remaining, max_frame_bytes));
  }
  if (partial_->size() + data.size() + remaining > max_frame_bytes) {
    partial_.reset();
    piece.status = Status::too_large;
    return piece;
  }
  partial_->insert(partial_->end(), data.begin(), data.end());
  if (!final) return piece;
  piece.status = Status::complete;
  piece.owner = std::move(partial_);
  piece.frame = *piece.owner;
  return piece;
}

}  // namespace fleetlink::broker
