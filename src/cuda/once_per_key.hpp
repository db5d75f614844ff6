// Values made once per key and kept for the process (kernels resolved or
// compiled per variant and device): the map's lock is held only to find a
// key's slot, so making one key's value (an NVRTC compile: seconds) does not
// hold up other keys, while callers of the same key wait for it. A make that
// throws leaves the key unmade; the next caller tries again. The wait is a
// mutex per key, not std::call_once: libstdc++'s call_once hangs later
// callers after a throwing make on some platforms (GCC PR 66146; aarch64
// hosts such as Grace Hopper's among those reported).
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
    std::lock_guard<std::mutex> make_lock(slot->mutex);
    if (!slot->made) {
      slot->value = make();
      slot->made = true;
    }
    return slot->value;
  }

 private:
  struct Slot {
    std::mutex mutex;
    bool made = false;
    Value value{};
  };
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<Slot>> slots_;
};

}  // namespace helixmla::cuda
