// The page's behaviour: list the models, send the text (or a WAV, uploaded or recorded) to the
// model's task route, show the answer and the time it took. No build step, no library.
"use strict";

const $ = (id) => document.getElementById(id);
let models = [];
let recorded = null;

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const key = $("key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function current() {
  return models.find((m) => m.name === $("model").value);
}

function show(text, isError) {
  $("output").textContent = text;
  $("output").className = isError ? "error" : "";
}

async function loadModels() {
  const r = await fetch("/v1/models", { headers: headers() });
  if (r.status === 401) {
    show("This server needs an API key: enter it above, then reload.", true);
    return;
  }
  models = (await r.json()).models;
  $("model").innerHTML = "";
  for (const m of models) {
    const o = document.createElement("option");
    o.value = m.name;
    o.textContent = `${m.name} (${m.actions[0]}, ${m.format} ${m.quantization})`;
    $("model").appendChild(o);
  }
  describe();
}

function describe() {
  const m = current();
  if (!m) return;
  const speech = m.actions[0] === "transcribe";
  $("text-panel").hidden = speech;
  $("audio-panel").hidden = !speech;
  const decode = m.decode ? `${m.decode.kind}(${Object.entries(m.decode.args).map(([k, v]) => `${k}=${v}`).join(", ")})` : "its own";
  $("about").textContent = `${m.task_kind} model from ${m.experiment || "?"}; decodes with ${decode}.`;
}

function parameters() {
  const p = {};
  const beam = $("beam").value.trim();
  if (beam) p.beam = Number(beam);
  return p;
}

async function run() {
  const m = current();
  if (!m) return;
  const action = m.actions[0];
  const started = performance.now();
  show("…", false);
  let r;
  if (action === "transcribe") {
    const file = recorded || $("wav").files[0];
    if (!file) { show("Choose a WAV file or record one.", true); return; }
    const form = new FormData();
    form.append("file", file, "audio.wav");
    form.append("parameters", JSON.stringify(parameters()));
    r = await fetch(`/v1/models/${encodeURIComponent(m.name)}/transcribe`, { method: "POST", body: form, headers: headers() });
  } else if (action !== "score") {
    // one sentence or prompt, streamed: the text shows as the server decides it
    const body = { text: [$("text").value.trim()], parameters: parameters(), stream: true };
    r = await fetch(`/v1/models/${encodeURIComponent(m.name)}/${action}`, {
      method: "POST", body: JSON.stringify(body), headers: headers({ "Content-Type": "application/json" }),
    });
    if (r.ok) { await streamed(r, started); return; }
  } else {
    const lines = $("text").value.split("\n").filter((s) => s.trim());
    r = await fetch(`/v1/models/${encodeURIComponent(m.name)}/score`, {
      method: "POST", body: JSON.stringify({ text: lines.length ? lines : [""] }),
      headers: headers({ "Content-Type": "application/json" }),
    });
  }
  const ms = performance.now() - started;
  const answer = await r.json();
  if (!r.ok) {
    show(`${r.status}: ${answer.error}` + (answer.field ? ` (${answer.field})` : ""), true);
  } else {
    const out = answer.translations || answer.texts || answer.scores || [answer.text];
    show(out.join("\n"), false);
  }
  $("latency").textContent = `${ms.toFixed(0)} ms`;
}

// Server-sent events: `data: {"text": piece}` while decoding, `event: done` with the answer.
async function streamed(r, started) {
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", shown = "";
  show("", false);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      const name = (block.match(/^event: (.*)$/m) || [])[1];
      const data = JSON.parse((block.match(/^data: (.*)$/m) || [])[1] || "{}");
      if (name === "done") shown = data.text;
      else if (name === "error") { show(data.error, true); return; }
      else shown += data.text;
      show(shown, false);
      $("latency").textContent = `${(performance.now() - started).toFixed(0)} ms`;
    }
  }
}

// Recording: the microphone's audio, resampled to the model's rate, mono, 16-bit PCM WAV.
async function record() {
  const m = current();
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const rec = new MediaRecorder(stream);
  const chunks = [];
  rec.ondataavailable = (e) => chunks.push(e.data);
  rec.onstop = async () => {
    stream.getTracks().forEach((t) => t.stop());
    const raw = await new Blob(chunks).arrayBuffer();
    const decoded = await new AudioContext().decodeAudioData(raw);
    const rate = m.sample_rate || 16000;
    const off = new OfflineAudioContext(1, Math.ceil(decoded.duration * rate), rate);
    const src = off.createBufferSource();
    src.buffer = decoded;
    src.connect(off.destination);
    src.start();
    recorded = wav((await off.startRendering()).getChannelData(0), rate);
    $("recording").textContent = `recorded ${decoded.duration.toFixed(1)} s`;
  };
  rec.start();
  $("recording").textContent = "recording… (3 s)";
  setTimeout(() => rec.stop(), 3000);
}

function wav(samples, rate) {
  const buf = new ArrayBuffer(44 + samples.length * 2);
  const v = new DataView(buf);
  const text = (o, s) => [...s].forEach((c, i) => v.setUint8(o + i, c.charCodeAt(0)));
  text(0, "RIFF"); v.setUint32(4, 36 + samples.length * 2, true); text(8, "WAVE");
  text(12, "fmt "); v.setUint32(16, 16, true); v.setUint16(20, 1, true); v.setUint16(22, 1, true);
  v.setUint32(24, rate, true); v.setUint32(28, rate * 2, true); v.setUint16(32, 2, true);
  v.setUint16(34, 16, true); text(36, "data"); v.setUint32(40, samples.length * 2, true);
  samples.forEach((x, i) => v.setInt16(44 + i * 2, Math.max(-1, Math.min(1, x)) * 32767, true));
  return new Blob([buf], { type: "audio/wav" });
}

$("model").addEventListener("change", describe);
$("go").addEventListener("click", run);
$("record").addEventListener("click", record);
$("wav").addEventListener("change", () => { recorded = null; });
loadModels();
