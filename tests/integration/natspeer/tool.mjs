// What the natsstore tests do to a server that neither the harness nor
// leasefs does (peer.mjs is the harness; this is the operator):
//
//   node tool.mjs URI config          the lease bucket's stream config, as
//                                     the server keeps it (JSON, keys sorted)
//   node tool.mjs URI max-age SECONDS set the lease bucket's max_age (and
//                                     its duplicate window down to it)
//   node tool.mjs URI entry KEY       "EPOCH REVISION" of the harness's key,
//                                     or "none"
//   node tool.mjs URI own-put KEY VAL put VAL at KEY in leasefs's bucket
//   node tool.mjs URI own-get KEY     "REVISION VALUE" of KEY in leasefs's
//                                     bucket, or "none"
import { connect } from "nats";

const [uri, what, arg] = process.argv.slice(2);
const nc = await connect({ servers: uri.replace(/^nats:\/\//, "").replace(/\?.*$/, "").split(",") });
const STREAM = "KV_natsstore_leases";
const api = async (subject, body) =>
  (await nc.request(subject, body === undefined ? "" : JSON.stringify(body), { timeout: 5000 })).json();
const sorted = (o) => Array.isArray(o) ? o.map(sorted)
  : o && typeof o === "object" ? Object.fromEntries(Object.keys(o).sort().map((k) => [k, sorted(o[k])]))
  : o;

let rc = 0;
if (what === "config") {
  const si = await api("$JS.API.STREAM.INFO." + STREAM);
  if (si.error) { console.log("none"); rc = 1; } else console.log(JSON.stringify(sorted(si.config)));
} else if (what === "max-age") {
  const si = await api("$JS.API.STREAM.INFO." + STREAM);
  const cfg = si.config;
  cfg.max_age = Number(arg) * 1e9;
  if (cfg.duplicate_window > cfg.max_age) cfg.duplicate_window = cfg.max_age;
  const r = await api("$JS.API.STREAM.UPDATE." + STREAM, cfg);
  if (r.error) { console.log("error " + JSON.stringify(r.error)); rc = 1; } else console.log("max_age " + arg);
} else if (what === "entry") {
  const kv = await nc.jetstream().views.kv("natsstore_leases", { bindOnly: true, allow_direct: true });
  const e = await kv.get(arg);
  if (!e || e.operation !== "PUT") console.log("none");
  else console.log(JSON.parse(new TextDecoder().decode(e.value)).epoch + " " + e.revision);
} else if (what === "own-get") {
  const kv = await nc.jetstream().views.kv("natsstore_leases_leasefs", { bindOnly: true, allow_direct: true });
  const e = await kv.get(arg);
  if (!e || e.operation !== "PUT") console.log("none");
  else console.log(e.revision + " " + new TextDecoder().decode(e.value));
} else if (what === "own-put") {
  const kv = await nc.jetstream().views.kv("natsstore_leases_leasefs", { bindOnly: true, allow_direct: true });
  await kv.put(arg, process.argv[5]);
  console.log("put");
} else {
  console.log("usage: tool.mjs URI config|max-age SECONDS|entry KEY");
  rc = 2;
}
await nc.close();
process.exit(rc);
