// The one mock model every system of bench/peers/peers.mjs calls: Kova's scripted model
// server (zero latency) in a process of its own, so that its CPU is nobody's. Each system
// names itself in `model`; the server counts, per name, the chat requests, the messages
// they carried and the tool results among them, and sends the counts to its parent on
// request (IPC), so the bench checks that every system made the same calls.
//
// A request that offers tools and does not end in tool results gets two parallel calls of
// get_weather; every other request gets a short text answer.
import { scriptedReply, startScriptedModelServer } from "../../dist/testing/index.js";

const counts = new Map();
const countFor = (model) => {
  let c = counts.get(model);
  if (!c) counts.set(model, (c = { modelCalls: 0, messages: 0, toolResults: 0, streamed: 0 }));
  return c;
};
const usage = { inputTokens: 20, outputTokens: 5 };

const server = await startScriptedModelServer({
  keepRequests: false,
  handler: (req) => {
    const c = countFor(req.model);
    c.modelCalls += 1;
    c.messages += req.messages.length;
    if (req.stream) c.streamed += 1;
    let toolResults = 0;
    for (const m of req.messages) if (m.role === "tool") toolResults += 1;
    c.toolResults += toolResults;
    if (req.tools.length > 0 && req.lastMessage?.role !== "tool") {
      return scriptedReply.toolCalls(
        [
          { name: "get_weather", arguments: { city: "Paris" } },
          { name: "get_weather", arguments: { city: "Oslo" } },
        ],
        { usage },
      );
    }
    return scriptedReply.text(toolResults > 0 ? "sunny in both" : "the answer is 42", { usage });
  },
});

process.on("message", (m) => {
  if (m === "counts") process.send({ counts: Object.fromEntries(counts) });
  if (m === "close") server.close().then(() => process.exit(0));
});
process.send({ url: server.url });
