// The chat example (chat.hpp).

#include "examples/chat.hpp"

#include <smarm/channel.hpp>
#include <smarm/pg.hpp>

#include <memory>
#include <string>
#include <variant>

namespace chat {

namespace http = smarm::http;

namespace {

/// One relayed message, shared by every member's queue.
struct line {
    std::string data;
    http::websocket::kind type;
};
using shared_line = std::shared_ptr<const line>;

}  // namespace

void serve(http::websocket& ws) {
    const std::string name = "chat/" + std::string(ws.request().param("room").value_or(""));
    const smarm::group<shared_line> room{name};
    auto [tx, rx] = smarm::channel<shared_line>();
    smarm::join(room, tx);
    struct leaver {
        const smarm::group<shared_line>& g;
        ~leaver() { (void)smarm::leave(g); }
    } const joined{room};
    if (!ws.send("joined " + name.substr(5))) return;
    for (;;) {
        auto ev = ws.recv_or({rx});
        if (auto* m = std::get_if<http::websocket::message>(&ev)) {
            if (m->is_close()) return;
            smarm::broadcast(room, std::make_shared<const line>(line{std::move(m->data), m->type}),
                             max_backlog);
            continue;
        }
        // Only this actor takes from rx, so a queue at the bound here (on
        // waking, or after a send that stalled) means a broadcast may have
        // skipped this member: it cannot promise every message any more.
        auto too_slow = [&] { return rx.queued() >= max_backlog; };
        if (too_slow()) {
            ws.close(1008, "too slow");
            return;
        }
        while (auto l = rx.try_recv()) {
            if (!ws.send((*l.value)->data, (*l.value)->type)) return;
            if (too_slow()) {
                ws.close(1008, "too slow");
                return;
            }
        }
    }
}

}  // namespace chat
