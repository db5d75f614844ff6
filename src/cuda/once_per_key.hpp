// Values made once per key and kept for the process (kernels resolved or
// compiled per variant and device): the map's lock is held only to find a
// key's slot, so making one key's value (an NVRTC compile: seconds) does not
// hold up other keys, while callers of the same key wait for it. A make that
// throws leaves the key unmade; the next caller tries again.
#pragma once

#include <map>
#include <memory>
#include <mutex>

namespace helixmla::cuda {

template <class Key, class Value>
class OncePerKey {
 public:
  template <class Make>
  Value get(const Key& key, Make&& make) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::shared_ptr<Slot>& found = slots_[key];
      if (!found) found = std::make_shared<Slot>();
      slot = found;
    }
    std::call_once(slot->once, [&] { slot->value = make(); });
    return slot->value;
  }

 private:
  struct Slot {
    std::once_flag once;
    Value value{};
  };
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<Slot>> slots_;
};

}  // namespace helixmla::cuda
