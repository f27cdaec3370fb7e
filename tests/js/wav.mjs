// A mono 16-bit PCM WAV (44-byte header) of `seconds` at `rate` Hz whose sample i is
// Math.round(sample(i)): the reference audio the JS tests upload.
export function pcmWav(seconds, rate, sample) {
  const n = Math.round(seconds * rate);
  const buf = Buffer.alloc(44 + 2 * n);
  buf.write("RIFF", 0); buf.writeUInt32LE(36 + 2 * n, 4); buf.write("WAVE", 8);
  buf.write("fmt ", 12); buf.writeUInt32LE(16, 16); buf.writeUInt16LE(1, 20);
  buf.writeUInt16LE(1, 22); buf.writeUInt32LE(rate, 24); buf.writeUInt32LE(2 * rate, 28);
  buf.writeUInt16LE(2, 32); buf.writeUInt16LE(16, 34); buf.write("data", 36);
  buf.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) buf.writeInt16LE(Math.round(sample(i)), 44 + 2 * i);
  return buf;
}
