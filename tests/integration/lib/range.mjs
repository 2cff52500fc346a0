// The head of an answer to a GET that may carry `Range: bytes=N-` (a resumed download), for a
// body of `size` bytes: 200 with the whole length, 206 from N, or 416 (sent and ended) past the
// end. Returns where the body starts, or null when the answer is already complete.
export function writeRangeHead(req, res, size) {
  const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
  if (!m) {
    res.writeHead(200, { 'Content-Length': size });
    return 0;
  }
  const start = Number(m[1]);
  if (start >= size) {
    res.writeHead(416, { 'Content-Range': `bytes */${size}` }).end();
    return null;
  }
  res.writeHead(206, { 'Content-Range': `bytes ${start}-${size - 1}/${size}`, 'Content-Length': size - start });
  return start;
}
