// A harness session on a natsstore, written from the store's facts alone
// (not from leasefs's code), with npm's nats client: bucket
// natsstore_leases (file storage, history 1); key = the name with
// '_' -> "_u", '.' -> "_d", '/' -> "_s"; value exactly {"epoch": number,
// "holder": 32 hex chars, "expires_at": RFC 3339}; acquire creates with
// epoch 1 when absent, takes over an expired entry with a
// revision-conditional update to epoch + 1, else is refused; renew every
// TTL/3 by a revision-conditional update of expires_at (a conflict or a
// missing key is loss); release sets expires_at to now and keeps the epoch.
//
//   node peer.mjs URI NAME try|hold|wait [TTL_S]
//     try   one attempt: "granted E" (then releases) or "busy E"
//     hold  "granted E" or "busy E" (exit 1); renews until stdin closes or
//           says "release"; "lost" if a renewal is refused
//     wait  tries every 50 ms until granted, then as hold; with WRITE_PROBE
//           set, first tries to create that file: "probe: OK" / "probe: ERRNO"
import { connect, StorageType } from "nats";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

const [uri, name, mode, ttlArg] = process.argv.slice(2);
const ttl = Number(ttlArg || 30);
const key = name.replace(/_/g, "_u").replace(/\./g, "_d").replace(/\//g, "_s");
const enc = (o) => new TextEncoder().encode(JSON.stringify(o));
const dec = (e) => JSON.parse(new TextDecoder().decode(e.value));
const out = (s) => process.stdout.write(s + "\n");

const nc = await connect({ servers: uri.replace(/^nats:\/\//, "").split(",") });
const kv = await nc.jetstream().views.kv("natsstore_leases",
  { history: 1, storage: StorageType.File });

async function acquire() {
  const holder = randomBytes(16).toString("hex");
  const expires = () => new Date(Date.now() + ttl * 1000).toISOString();
  const e = await kv.get(key);
  if (!e || e.operation !== "PUT") {
    try {
      const v = { epoch: 1, holder, expires_at: expires() };
      return { v, rev: await kv.create(key, enc(v)) };
    } catch { return acquire(); }
  }
  const cur = dec(e);
  if (Date.parse(cur.expires_at) > Date.now()) return { busy: cur.epoch };
  const v = { epoch: cur.epoch + 1, holder, expires_at: expires() };
  try {
    return { v, rev: await kv.update(key, enc(v), e.revision) };
  } catch {
    return acquire();
  }
}

async function release(g) {
  const v = { ...g.v, expires_at: new Date().toISOString() };
  try { await kv.update(key, enc(v), g.rev); } catch { /* not ours any more */ }
}

async function hold(g) {
  let done = false;
  const lines = createInterface({ input: process.stdin });
  lines.on("line", (l) => { if (l.trim() === "release") done = true; });
  lines.on("close", () => { done = true; });
  while (!done) {
    await new Promise((r) => setTimeout(r, 100));
    if (Date.now() < g.next) continue;
    g.v = { ...g.v, expires_at: new Date(Date.now() + ttl * 1000).toISOString() };
    try {
      g.rev = await kv.update(key, enc(g.v), g.rev);
      g.next = Date.now() + (ttl * 1000) / 3;
    } catch {
      out("lost");
      await nc.close();
      process.exit(2);
    }
  }
  await release(g);
}

let g = await acquire();
while (g.busy !== undefined && mode === "wait") {
  await new Promise((r) => setTimeout(r, 50));
  g = await acquire();
}
if (g.busy !== undefined) {
  out("busy " + g.busy);
  await nc.close();
  process.exit(mode === "hold" ? 1 : 0);
}
out("granted " + g.v.epoch);
if (mode === "try") {
  await release(g);
} else {
  if (process.env.WRITE_PROBE) {
    try {
      writeFileSync(process.env.WRITE_PROBE, "peer\n");
      out("probe: OK");
    } catch (e) {
      out("probe: " + e.code);
    }
  }
  g.next = Date.now() + (ttl * 1000) / 3;
  await hold(g);
}
await nc.close();
