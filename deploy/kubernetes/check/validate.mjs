// Offline check of the Kubernetes manifests: node validate.mjs FILE.yaml...
// Every YAML document must parse without warnings (duplicate keys fail), and then pass two checks:
//  1. the JSON schema of its kind, from kubernetes-models (the OpenAPI schemas of Kubernetes 1.27, compiled for ajv:
//     required fields, types, enums, formats);
//  2. no field the Kubernetes API does not define (those schemas allow unknown fields, and kubectl would only warn
//     or drop them): every object is walked along the model classes of @kubernetes/client-node (OpenAPI
//     release-1.36), whose attribute maps list each object's fields and their types, and an unknown field, a wrong
//     scalar type or a non-integer where an integer belongs fails.
// Exit 0 when every document passes, 1 otherwise, listing every problem as FILE#DOC PATH: MESSAGE.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseAllDocuments } from "yaml";

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const modelsDir = join(here, "node_modules/@kubernetes/client-node/dist/gen/models");

// apiVersion/kind -> [kubernetes-models module, client-node class]
const KINDS = {
  "v1/ConfigMap": ["kubernetes-models/v1/ConfigMap", "V1ConfigMap"],
  "v1/Namespace": ["kubernetes-models/v1/Namespace", "V1Namespace"],
  "v1/Pod": ["kubernetes-models/v1/Pod", "V1Pod"],
  "v1/PersistentVolumeClaim": ["kubernetes-models/v1/PersistentVolumeClaim", "V1PersistentVolumeClaim"],
  "v1/ServiceAccount": ["kubernetes-models/v1/ServiceAccount", "V1ServiceAccount"],
  "v1/Service": ["kubernetes-models/v1/Service", "V1Service"],
  "apps/v1/DaemonSet": ["kubernetes-models/apps/v1/DaemonSet", "V1DaemonSet"],
  "node.k8s.io/v1/RuntimeClass": ["kubernetes-models/node.k8s.io/v1/RuntimeClass", "V1RuntimeClass"],
  "networking.k8s.io/v1/NetworkPolicy": ["kubernetes-models/networking.k8s.io/v1/NetworkPolicy", "V1NetworkPolicy"],
};

const classes = new Map();
async function attributes(type) {
  if (!classes.has(type)) {
    const mod = await import(pathToFileURL(join(modelsDir, `${type}.js`)).href);
    classes.set(type, mod[type].getAttributeTypeMap());
  }
  return classes.get(type);
}

const kindOf = (v) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

async function walk(value, type, format, path, problems) {
  const bad = (what) => problems.push(`${path || "/"}: ${what}`);
  if (value === null) return; // YAML's empty value: the API treats it as absent
  let m;
  if (type === "any" || type === "object") return;
  if (type === "string" || type === "Date") {
    if (typeof value !== "string") bad(`expected a string, got ${kindOf(value)} ${JSON.stringify(value)}`);
  } else if (type === "number") {
    if (typeof value !== "number") bad(`expected a number, got ${kindOf(value)} ${JSON.stringify(value)}`);
    else if (/^int/.test(format) && !Number.isInteger(value)) bad(`expected an integer (${format}), got ${value}`);
  } else if (type === "boolean") {
    if (typeof value !== "boolean") bad(`expected true or false, got ${kindOf(value)} ${JSON.stringify(value)}`);
  } else if (type === "IntOrString") {
    if (typeof value !== "string" && !Number.isInteger(value)) bad(`expected an integer or a string, got ${JSON.stringify(value)}`);
  } else if ((m = /^Array<(.+)>$/.exec(type))) {
    if (!Array.isArray(value)) return bad(`expected a list, got ${kindOf(value)}`);
    for (let i = 0; i < value.length; i++) await walk(value[i], m[1], "", `${path}/${i}`, problems);
  } else if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (kindOf(value) !== "object") return bad(`expected a map, got ${kindOf(value)}`);
    for (const [k, v] of Object.entries(value)) await walk(v, m[1], "", `${path}/${k}`, problems);
  } else {
    if (kindOf(value) !== "object") return bad(`expected an object (${type}), got ${kindOf(value)}`);
    const attrs = await attributes(type);
    const byName = new Map(attrs.map((a) => [a.baseName, a]));
    for (const [k, v] of Object.entries(value)) {
      const a = byName.get(k);
      if (!a) {
        const known = attrs.map((x) => x.baseName);
        const near = known.filter((n) => n.toLowerCase() === k.toLowerCase() || distance(n, k) <= 2);
        bad(`unknown field "${k}" in ${type}${near.length ? ` (did you mean ${near.join(", ")}?)` : ""}`);
      } else {
        await walk(v, a.type, a.format, `${path}/${k}`, problems);
      }
    }
  }
}

function distance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length][b.length];
}

let failed = 0;
let checked = 0;
for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"), { uniqueKeys: true, strict: true });
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i];
    const where = `${file}#${i + 1}`;
    const problems = [...doc.errors, ...doc.warnings].map((e) => `yaml: ${e.message.split("\n")[0]}`);
    const obj = problems.length ? null : doc.toJS();
    if (obj === null && !problems.length) continue; // an empty document (a trailing ---)
    if (obj) {
      const key = `${obj.apiVersion}/${obj.kind}`;
      const entry = KINDS[key];
      if (!entry) {
        problems.push(`apiVersion/kind ${key} is not one this check knows (${Object.keys(KINDS).join(", ")})`);
      } else {
        const Model = Object.values(require(entry[0])).find((v) => typeof v === "function");
        try {
          new Model(obj).validate();
        } catch (e) {
          for (const line of String(e.message).split("\n")) if (line.trim()) problems.push(`schema: ${line.trim()}`);
        }
        await walk(obj, entry[1], "", "", problems);
      }
    }
    checked++;
    if (problems.length) {
      failed++;
      for (const p of problems) console.log(`${where} ${p}`);
    } else {
      console.log(`${where} ok: ${obj.kind} ${obj.metadata?.name ?? ""}`);
    }
  }
}
console.log(failed ? `k8s-check: ${failed} of ${checked} documents FAILED` : `k8s-check: ${checked} documents ok`);
process.exit(failed ? 1 : 0);
