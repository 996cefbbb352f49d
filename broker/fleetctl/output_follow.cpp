#include "output_follow.hpp"

namespace fleetctl {

std::string OutputFollower::take(std::uint64_t offset, std::string_view data) {
  const std::uint64_t end = offset + data.size();
  if (!started_) {
    // The first piece sets where printing starts: a stored tail may begin past 0.
    started_ = true;
    gap_ += offset;
    end_ = end;
    return std::string(data);
  }
  if (end <= end_) return {};  // seen already
  if (offset > end_) {
    gap_ += offset - end_;
    end_ = end;
    return std::string(data);
  }
  const std::string_view fresh = data.substr(static_cast<std::size_t>(end_ - offset));
  end_ = end;
  return std::string(fresh);
}

std::vector<SseReader::Event> SseReader::feed(std::string_view piece) {
  std::vector<Event> out;
  buffer_.append(piece);
  std::size_t pos;
  while ((pos = buffer_.find("\n\n")) != std::string::npos) {
    const std::string block = buffer_.substr(0, pos);
    buffer_.erase(0, pos + 2);
    Event e;
    bool has_data = false;
    std::size_t start = 0;
    while (start <= block.size()) {
      std::size_t stop = block.find('\n', start);
      if (stop == std::string::npos) stop = block.size();
      std::string_view line(block.data() + start, stop - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      auto value = [&](std::size_t skip) {
        std::string_view v = line.substr(skip);
        if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
        return v;
      };
      if (line.rfind("data:", 0) == 0) {
        if (has_data) e.data += '\n';
        e.data += value(5);
        has_data = true;
      } else if (line.rfind("event:", 0) == 0) {
        e.name = std::string(value(6));
      }
      start = stop + 1;
    }
    if (has_data) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace fleetctl
