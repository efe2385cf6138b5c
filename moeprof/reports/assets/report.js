/* moeprof report timeline: one <canvas> per input, plain JavaScript, no dependencies, no network.
 *
 * Each frame turns the events in view into per-pixel coverage per category, then paints runs of
 * equal pixels as rectangles: the cost is O(events in view + pixels), whatever the zoom. */
(function () {
  'use strict';
  var status = document.getElementById('moeprof-status');
  var DATA = JSON.parse(document.getElementById('moeprof-data').textContent);
  var CATS = DATA.categories;
  var COLORS = CATS.map(function (c) { return DATA.colors[c]; });
  var EXPOSED = DATA.codes.exposed;
  var WAIT = DATA.codes.wait;  // the ledger's wait parts of comm (spec §8), drawn as a paler shade of comm
  var CRIT = DATA.codes.critical;  // a projection's critical path (spec §9), a dark band under the lane
  var COMM_CODES = [1, 2, 3];
  var PALE = 'rgba(255, 255, 255, 0.6)';
  var SKEW_COLOR = '#6d4c41';

  // lane labels: a stream lane names its device and stream
  var GUTTER = DATA.inputs.some(function (i) { return i.mode === 'stream'; }) ? 290 : 200;
  var RIGHT = 12;
  var AXIS = 36;      // time axis and step labels
  var TRACK = { device: 17, stream: 15 };
  var EXPOSED_H = 8;
  var CRIT_H = 5;
  var GAP = 10;
  var SKEW_HEAD = 20;  // heading of the arrival-skew rows
  var SKEW_H = 13;

  // base64 -> typed arrays (the report writes little-endian, as every laptop CPU is)
  function bytes(b64) {
    var bin = atob(b64 || '');
    var out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function u32(b64) { var b = bytes(b64); return new Uint32Array(b.buffer, 0, b.length >> 2); }
  function u16(b64) { var b = bytes(b64); return new Uint16Array(b.buffer, 0, b.length >> 1); }

  function decodeTrack(t, labelBytes) {
    var codes = {};
    var c = bytes(t.c);
    for (var i = 0; i < c.length; i++) codes[c[i]] = true;
    var bins = null;
    if (t.b) {
      bins = {};
      Object.keys(t.b).forEach(function (k) { bins[k] = bytes(t.b[k]); codes[k] = true; });
    }
    return {
      name: t.name, n: t.n, s: u32(t.s), d: u32(t.d), c: c, md: t.md,
      l: t.l ? (labelBytes === 2 ? u16(t.l) : u32(t.l)) : null,
      bins: bins,
      codes: Object.keys(codes).map(Number).sort(function (a, b) { return a - b; })
    };
  }

  // first index i with a[i] >= x
  function lowerBound(a, x) {
    var lo = 0, hi = a.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (a[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // add weight w over the pixel range [a, b) (fractional ends), into arr of width W
  function addSpan(arr, a, b, w, W) {
    if (b <= 0 || a >= W || b <= a) return;
    if (a < 0) a = 0;
    if (b > W) b = W;
    var ia = Math.floor(a), ib = Math.floor(b);
    if (ia === ib) { arr[ia] += (b - a) * w; return; }
    arr[ia] += (ia + 1 - a) * w;
    for (var k = ia + 1; k < ib; k++) arr[k] += w;
    if (ib < W) arr[ib] += (b - ib) * w;
  }

  function ellipsize(ctx, text, maxW) {
    if (ctx.measureText(text).width <= maxW) return text;
    var t = text;
    while (t.length > 2 && ctx.measureText(t + '…').width > maxW) t = t.slice(0, -1);
    return t + '…';
  }

  function niceStep(x) {
    var p = Math.pow(10, Math.floor(Math.log10(x)));
    var m = x / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  function fmtMs(ns, stepNs) {
    var dec = Math.max(0, Math.min(6, Math.ceil(-Math.log10(stepNs / 1e6))));
    return (ns / 1e6).toFixed(dec) + ' ms';
  }

  // ns of the sorted disjoint segments (s, d) inside [a, b)
  function overlap(seg, a, b) {
    var sum = 0;
    for (var i = Math.max(0, lowerBound(seg.s, a) - 1); i < seg.n && seg.s[i] < b; i++) {
      var x = Math.min(b, seg.s[i] + seg.d[i]) - Math.max(a, seg.s[i]);
      if (x > 0) sum += x;
    }
    return sum;
  }

  function fmtDur(ns) {
    if (ns >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
    if (ns >= 1e3) return (ns / 1e3).toFixed(2) + ' µs';
    return ns + ' ns';
  }

  function Timeline(root, input) {
    this.root = root;
    this.input = input;
    this.canvas = root.querySelector('canvas');
    this.tip = root.querySelector('.tip');
    this.ctx = this.canvas.getContext('2d');
    this.unit = input.unit;
    this.span = Math.max(input.span, 1);
    this.bins = input.bins || null;
    this.labels = input.labels;
    this.trackH = TRACK[input.mode] || TRACK.device;
    var lb = input.label_bytes;
    this.lanes = input.lanes.map(function (lane) {
      return {
        label: lane.label, group: lane.group, steps: lane.steps, device: lane.device, stream: lane.stream,
        tracks: lane.tracks.map(function (t) { return decodeTrack(t, lb); }),
        exposed: lane.exposed ? decodeTrack(lane.exposed, lb) : null,
        ownWait: lane.wait ? decodeTrack(lane.wait, lb) : null,
        crit: lane.crit ? decodeTrack(lane.crit, lb) : null
      };
    });
    // the wait parts are per device: every lane of the device (its streams) shades its comm with them
    var waitOf = {};
    this.lanes.forEach(function (lane) { if (lane.ownWait) waitOf[lane.group] = lane.ownWait; });
    this.lanes.forEach(function (lane) { lane.wait = waitOf[lane.group] || null; });
    this.height = AXIS + 4;
    var self = this;
    this.lanes.forEach(function (lane, i) {
      lane.y = self.height;
      lane.h = lane.tracks.length * self.trackH + (lane.exposed ? EXPOSED_H + 3 : 0) + (lane.crit ? CRIT_H + 3 : 0);
      var next = self.lanes[i + 1];
      // lanes of one device sit close together; devices are set apart
      self.height += lane.h + (next && next.group === lane.group ? 2 : GAP);
    });
    // arrival skew (spec §8): per costly collective, each instance from its first to its last arrival
    var skew = input.skew || { devices: [], rows: [] };
    this.skewDevices = skew.devices;
    this.skew = skew.rows.map(function (r) {
      var rel = u32(r.s), s = new Float64Array(rel.length);
      for (var i = 0; i < rel.length; i++) s[i] = rel[i] + r.o;
      return { name: r.name, kind: r.kind, n: r.n, count: r.count, s: s, d: u32(r.d), w: u32(r.w), md: r.md };
    });
    if (this.skew.length) {
      this.skewY = this.height + SKEW_HEAD;
      this.height = this.skewY + this.skew.length * SKEW_H + 6;
    }
    this.reset();
    this.bind();
    this.resize();
  }

  Timeline.prototype.reset = function () { this.v0 = 0; this.v1 = this.span; };

  Timeline.prototype.resize = function () {
    var dpr = window.devicePixelRatio || 1;
    this.W = Math.max(this.root.clientWidth - 10, 400);
    this.plotW = Math.max(this.W - GUTTER - RIGHT, 100);
    this.canvas.style.height = this.height + 'px';
    this.canvas.width = Math.round(this.W * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.draw();
  };

  Timeline.prototype.schedule = function () {
    var self = this;
    if (this.pending) return;
    this.pending = true;
    window.requestAnimationFrame(function () { self.pending = false; self.draw(); });
  };

  // per category present in the track, a Float32Array of per-pixel coverage (1 = the whole pixel's time)
  Timeline.prototype.coverage = function (track) {
    var W = this.plotW, v0 = this.v0, k = W / (this.v1 - this.v0);
    var arrs = {};
    track.codes.forEach(function (c) { arrs[c] = new Float32Array(W + 1); });
    var s = track.s, d = track.d, c = track.c, n = track.n;
    var end = this.v1;
    // the union per category, as the figures count it: sorted by start, add only what passes the reach so far
    var reach = {};
    track.codes.forEach(function (code) { reach[code] = -Infinity; });
    for (var i = lowerBound(s, v0 - track.md); i < n && s[i] < end; i++) {
      var ci = c[i], e = s[i] + d[i];
      if (e <= reach[ci]) continue;
      addSpan(arrs[ci], (Math.max(s[i], reach[ci]) - v0) * k, (e - v0) * k, 1, W);
      reach[ci] = e;
    }
    var bins = this.bins;
    if (bins && track.bins) {
      // bin b covers [o + b w, o + (b + 1) w): one grid for all lanes, its origin at or before the timeline's
      var bw = bins.w, bo = bins.o;
      var first = Math.max(0, Math.floor((v0 - bo) / bw)), last = Math.min(bins.n, Math.ceil((end - bo) / bw));
      var codes = Object.keys(track.bins);
      for (var b = first; b < last; b++) {
        var bs = bo + b * bw, be = bs + bw;
        // binned coverage only outside the detail window, where raw events are drawn
        var pieces = [[bs, Math.min(be, bins.w0)], [Math.max(bs, bins.w1), be]];
        for (var j = 0; j < codes.length; j++) {
          var val = track.bins[codes[j]][b];
          if (!val) continue;
          for (var p = 0; p < 2; p++) {
            if (pieces[p][1] > pieces[p][0]) addSpan(arrs[codes[j]], (pieces[p][0] - v0) * k, (pieces[p][1] - v0) * k, val / 255, W);
          }
        }
      }
    }
    return arrs;
  };

  // stacked per-pixel bars, bottom-up in category order; runs of equal pixels become one rectangle.
  // ``wait`` (per-pixel coverage of the device's wait parts, or null) pales the top of the comm part of the
  // stack: the wait parts lie inside comm, so the pale share of the comm bar is the share spent waiting.
  // Returns the pixel columns that got a pale part. A category of ``codes`` the coverage lacks (a track with no
  // activity of it: a TPU chip's exposed-comm track when no communication is exposed) covers nothing.
  Timeline.prototype.paint = function (arrs, codes, x0, y, H, wait) {
    var ctx = this.ctx, W = this.plotW;
    var none = new Float32Array(W + 1);
    var cols = codes.map(function (c) { return arrs[c] || none; });
    var runs = codes.map(function () { return { x: -1, top: 0, h: 0 }; });
    var pale = { x: -1, top: 0, h: 0 };
    var paled = 0;
    function flush(ci, x) {
      var r = runs[ci];
      if (r.x >= 0 && r.h > 0) { ctx.fillStyle = COLORS[codes[ci]]; ctx.fillRect(x0 + r.x, r.top, x - r.x, r.h); }
      r.x = -1;
    }
    var paleRects = [];  // painted after the loop: a comm run still open would cover them
    function flushPale(x) {
      if (pale.x >= 0 && pale.h > 0) paleRects.push([x0 + pale.x, pale.top, x - pale.x, pale.h]);
      pale.x = -1;
    }
    var isComm = codes.map(function (c) { return COMM_CODES.indexOf(c) >= 0; });
    var shade = wait && isComm.some(Boolean);
    for (var x = 0; x <= W; x++) {
      var total = 0;
      if (x < W) for (var ci = 0; ci < codes.length; ci++) total += cols[ci][x];
      var scale = total > 1 ? 1 / total : 1;
      var acc = 0, commTop = 0, commH = 0;
      for (ci = 0; ci < codes.length; ci++) {
        var v = x < W ? cols[ci][x] * scale : 0;
        var h = v > 0 ? Math.max(1, Math.round(v * H * 2) / 2) : 0;
        if (acc + h > H) h = H - acc;
        var top = y + H - acc - h;
        if (isComm[ci] && h > 0) { commTop = top; commH += h; }
        acc += h;
        var r = runs[ci];
        if (h > 0 && r.x >= 0 && r.top === top && r.h === h) continue;
        flush(ci, x);
        if (h > 0) { r.x = x; r.top = top; r.h = h; }
      }
      if (!shade) continue;
      var wv = x < W ? wait[x] * scale : 0;
      var wh = wv > 0 && commH > 0 ? Math.min(commH, Math.max(1, Math.round(wv * H * 2) / 2)) : 0;
      if (wh > 0) paled++;
      if (wh > 0 && pale.x >= 0 && pale.top === commTop && pale.h === wh) continue;
      flushPale(x);
      if (wh > 0) { pale.x = x; pale.top = commTop; pale.h = wh; }
    }
    ctx.fillStyle = PALE;
    paleRects.forEach(function (q) { ctx.fillRect(q[0], q[1], q[2], q[3]); });
    return paled;
  };

  Timeline.prototype.xOf = function (t) { return GUTTER + (t - this.v0) * this.plotW / (this.v1 - this.v0); };

  Timeline.prototype.draw = function () {
    var ctx = this.ctx, W = this.W, self = this;
    var unit = this.unit, k = this.plotW / (this.v1 - this.v0);
    ctx.clearRect(0, 0, W, this.height);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, W, this.height);
    ctx.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
    ctx.textBaseline = 'middle';

    // the detail window of a binned input: single kernels are drawn only there
    if (this.bins) {
      var wx0 = Math.max(GUTTER, this.xOf(this.bins.w0)), wx1 = Math.min(W - RIGHT, this.xOf(this.bins.w1));
      if (wx1 > wx0) {
        ctx.fillStyle = '#fff8e1';
        ctx.fillRect(wx0, AXIS - 6, wx1 - wx0, this.height - AXIS + 6);
        ctx.fillStyle = '#8d6e00';
        ctx.textAlign = 'left';
        if (wx1 - wx0 > 150) ctx.fillText('detail window: single kernels', wx0 + 4, AXIS - 1);
      }
    }

    // time axis, in ms since the start of the timeline
    var stepNs = niceStep(90 / k * unit);
    var stepT = stepNs / unit;
    ctx.strokeStyle = '#eeeeee';
    ctx.fillStyle = '#424242';
    ctx.textAlign = 'center';
    ctx.lineWidth = 1;
    for (var t = Math.ceil(this.v0 / stepT) * stepT; t <= this.v1; t += stepT) {
      var x = Math.round(this.xOf(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, 16); ctx.lineTo(x, this.height); ctx.stroke();
      ctx.fillText(fmtMs(t * unit, stepNs), x, 8);
    }
    ctx.textAlign = 'left';
    ctx.fillStyle = '#616161';
    ctx.fillText('time since trace start →', 4, 8);
    if (this.lanes.some(function (l) { return l.steps.length; })) ctx.fillText('steps:', 4, 24);

    // step numbers from the first lane that has steps
    var withSteps = this.lanes.filter(function (l) { return l.steps.length; })[0];
    if (withSteps) {
      var lastX = -1e9;
      ctx.fillStyle = '#616161';
      withSteps.steps.forEach(function (st) {
        var sx = self.xOf(st[0]), ex = self.xOf(st[1]);
        if (ex < GUTTER || sx > W - RIGHT) return;
        var lx = Math.max(sx, GUTTER) + 3;
        if (lx - lastX < 52 || Math.min(ex, W - RIGHT) - lx < 30) return;
        ctx.fillText('step ' + st[2], lx, 24);
        lastX = lx;
      });
    }

    var prevGroup = null;
    var drawn = 0;
    var paled = 0;
    var critical = 0;
    this.rows = [];
    this.lanes.forEach(function (lane) {
      var y = lane.y;
      var wait = lane.wait ? self.coverage(lane.wait)[WAIT] || null : null;
      if (prevGroup !== null && lane.group !== prevGroup) {
        ctx.strokeStyle = '#bdbdbd';
        ctx.beginPath(); ctx.moveTo(0, y - GAP / 2 - 0.5); ctx.lineTo(W, y - GAP / 2 - 0.5); ctx.stroke();
      }
      var firstOfGroup = lane.group !== prevGroup;
      prevGroup = lane.group;
      var FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
      var ly = y + Math.min(lane.h, self.trackH * 2) / 2;
      if (lane.device === undefined) {
        // one lane per device: its name, ellipsized to the gutter; track names beside the plot
        ctx.fillStyle = '#212121';
        ctx.font = '600 12px ' + FONT;
        ctx.fillText(ellipsize(ctx, lane.label, GUTTER - 92), 4, ly);
      } else {
        // one lane per stream: the device name once per group, the stream names in a column after it
        ctx.font = '600 12px ' + FONT;
        var col = Math.min(110, ctx.measureText(lane.device).width + 10);
        ctx.fillStyle = '#212121';
        if (firstOfGroup) ctx.fillText(ellipsize(ctx, lane.device, col - 8), 4, ly);
        ctx.font = '11px ' + FONT;
        ctx.fillStyle = '#424242';
        if (lane.stream) ctx.fillText(ellipsize(ctx, lane.stream, GUTTER - col - 12), 4 + col, ly);
      }
      ctx.font = '11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
      ctx.textAlign = 'right';
      ctx.fillStyle = '#757575';
      lane.tracks.forEach(function (track, i) {
        var ty = y + i * self.trackH;
        ctx.fillStyle = '#757575';
        if (self.input.mode !== 'stream') ctx.fillText(track.name, GUTTER - 6, ty + self.trackH / 2);
        ctx.fillStyle = '#f5f5f5';
        ctx.fillRect(GUTTER, ty + 1, self.plotW, self.trackH - 3);
        paled += self.paint(self.coverage(track), track.codes, GUTTER, ty + 1, self.trackH - 3, wait);
        self.rows.push({ y: ty, h: self.trackH, lane: lane, track: track });
      });
      if (lane.exposed) {
        var ey = y + lane.tracks.length * self.trackH + 1;
        ctx.fillStyle = '#c62828';
        ctx.fillText('exposed comm', GUTTER - 6, ey + EXPOSED_H / 2);
        ctx.fillStyle = '#fbe9e7';
        ctx.fillRect(GUTTER, ey, self.plotW, EXPOSED_H);
        // its own codes: a lane with no exposed comm (a one-chip TPU capture) has an empty track and no EXPOSED
        self.paint(self.coverage(lane.exposed), lane.exposed.codes, GUTTER, ey, EXPOSED_H);
        self.rows.push({ y: ey - 1, h: EXPOSED_H + 2, lane: lane, track: lane.exposed });
      }
      if (lane.crit) {
        var cy = y + lane.tracks.length * self.trackH + (lane.exposed ? EXPOSED_H + 3 : 0) + 1;
        ctx.fillStyle = '#212121';
        ctx.fillText('critical path', GUTTER - 6, cy + CRIT_H / 2);
        ctx.fillStyle = '#eeeeee';
        ctx.fillRect(GUTTER, cy, self.plotW, CRIT_H);
        self.paint(self.coverage(lane.crit), lane.crit.codes, GUTTER, cy, CRIT_H);  // none: a lane off the path
        self.rows.push({ y: cy - 1, h: CRIT_H + 2, lane: lane, track: lane.crit });
        critical += lane.crit.n;
      }
      ctx.textAlign = 'left';
      // step boundaries of this lane's device
      ctx.strokeStyle = '#616161';
      ctx.setLineDash([3, 3]);
      lane.steps.forEach(function (st) {
        [st[0], st[1]].forEach(function (tt) {
          var sx = Math.round(self.xOf(tt)) + 0.5;
          if (sx < GUTTER || sx > W - RIGHT) return;
          ctx.beginPath(); ctx.moveTo(sx, y - 2); ctx.lineTo(sx, y + lane.h + 1); ctx.stroke();
        });
      });
      ctx.setLineDash([]);
      drawn++;
    });
    this.drawn = drawn;
    this.paled = paled;
    this.critical = critical;  // critical-path activities in the drawn lanes
    this.drawSkew();
    this.root.setAttribute('data-lanes-drawn', String(drawn));
  };

  // the arrival-skew rows under the lanes: each instance a bar from its first to its last arrival
  Timeline.prototype.drawSkew = function () {
    var ctx = this.ctx, W = this.W, self = this;
    if (!this.skew.length) return;
    var FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
    var hy = this.skewY - SKEW_HEAD;
    ctx.strokeStyle = '#bdbdbd';
    ctx.beginPath(); ctx.moveTo(0, hy - 0.5); ctx.lineTo(W, hy - 0.5); ctx.stroke();
    ctx.textAlign = 'left';
    ctx.fillStyle = '#212121';
    ctx.font = '600 12px ' + FONT;
    ctx.fillText('arrival skew: first → last arrival of each instance (reference clock)', 4, hy + SKEW_HEAD / 2);
    this.skewBars = 0;
    this.skew.forEach(function (row, i) {
      var ry = self.skewY + i * SKEW_H;
      ctx.font = '11px ' + FONT;
      ctx.fillStyle = '#424242';
      ctx.textAlign = 'left';
      var label = row.name === row.kind ? row.name : row.name + ' · ' + row.kind;
      ctx.fillText(ellipsize(ctx, label, GUTTER - 10), 4, ry + SKEW_H / 2);
      ctx.fillStyle = '#f5f5f5';
      ctx.fillRect(GUTTER, ry + 1, self.plotW, SKEW_H - 2);
      ctx.fillStyle = SKEW_COLOR;
      for (var j = lowerBound(row.s, self.v0 - row.md); j < row.n && row.s[j] <= self.v1; j++) {
        var x0 = Math.max(self.xOf(row.s[j]), GUTTER), x1 = Math.min(self.xOf(row.s[j] + row.d[j]), W - RIGHT);
        if (x1 < GUTTER || x0 > W - RIGHT) continue;
        ctx.fillRect(x0, ry + 3, Math.max(x1 - x0, 2), SKEW_H - 6);
        self.skewBars++;
      }
    });
  };

  // the instances of a skew row at time t: every one that contains t (instances of one collective on
  // different groups can overlap), else the nearest within tol; at most ``max``
  Timeline.prototype.findSkew = function (row, t, tol, max) {
    var hits = [], best = -1, bestDist = tol + 1;
    for (var i = lowerBound(row.s, t + 1) - 1; i >= 0 && row.s[i] >= t - row.md - tol; i--) {
      var dist = t > row.s[i] + row.d[i] ? t - row.s[i] - row.d[i] : 0;
      if (dist === 0) hits.push(i);
      else if (dist < bestDist) { best = i; bestDist = dist; }
    }
    if (hits.length) return hits.reverse().slice(0, max);
    var next = lowerBound(row.s, t + 1);
    if (next < row.n && row.s[next] - t < bestDist) best = next;
    return best >= 0 ? [best] : [];
  };

  Timeline.prototype.describeSkew = function (row, j) {
    var unit = this.unit, s = row.s[j], d = row.d[j];
    return row.name + ' (' + row.kind + ') · instance ' + (j + 1) + ' of ' + row.n + '\n' +
      'first arrival ' + fmtMs(s * unit, 1) + ', last ' + fmtMs((s + d) * unit, 1) + ': spread ' + fmtDur(d * unit) + '\n' +
      'last to arrive: ' + this.skewDevices[row.w[j]];
  };

  // colored pixels in the plot: a blank canvas would mean nothing was painted
  Timeline.prototype.inked = function () {
    var dpr = window.devicePixelRatio || 1;
    var img = this.ctx.getImageData(Math.round(GUTTER * dpr), Math.round(AXIS * dpr),
      Math.max(1, Math.round(this.plotW * dpr)), Math.max(1, Math.round((this.height - AXIS) * dpr))).data;
    var count = 0;
    for (var i = 0; i < img.length; i += 4) {
      var r = img[i], g = img[i + 1], b = img[i + 2];
      if (Math.max(r, g, b) - Math.min(r, g, b) > 40) count++;
    }
    return count;
  };

  Timeline.prototype.timeAt = function (px) { return this.v0 + (px - GUTTER) * (this.v1 - this.v0) / this.plotW; };

  Timeline.prototype.zoom = function (factor, px) {
    var anchor = this.timeAt(Math.min(Math.max(px, GUTTER), GUTTER + this.plotW));
    var minSpan = Math.max(2, 1000 / this.unit);  // 1 µs
    var width = Math.min(Math.max((this.v1 - this.v0) * factor, minSpan), this.span * 1.05);
    var frac = (anchor - this.v0) / (this.v1 - this.v0);
    this.v0 = anchor - frac * width;
    this.v1 = this.v0 + width;
    this.clamp();
    this.schedule();
  };

  Timeline.prototype.clamp = function () {
    var width = this.v1 - this.v0, pad = this.span * 0.025;
    if (this.v0 < -pad) { this.v0 = -pad; this.v1 = this.v0 + width; }
    if (this.v1 > this.span + pad) { this.v1 = this.span + pad; this.v0 = this.v1 - width; }
  };

  // the raw event under time t (or within tol of it): the shortest one that contains t, else the nearest
  Timeline.prototype.find = function (row, t, tol) {
    var tr = row.track, s = tr.s, d = tr.d;
    var best = -1, bestDist = tol + 1;
    for (var i = lowerBound(s, t + 1) - 1; i >= 0 && s[i] >= t - tr.md - tol; i--) {
      var dist = t > s[i] + d[i] ? t - s[i] - d[i] : 0;
      if (dist < bestDist || (dist === bestDist && d[i] < d[best])) { best = i; bestDist = dist; }
    }
    var next = lowerBound(s, t + 1);
    if (next < tr.n && s[next] - t < bestDist) best = next;
    return best;
  };

  Timeline.prototype.describe = function (px, py) {
    var self = this;
    if (this.skew.length && py >= this.skewY && py < this.skewY + this.skew.length * SKEW_H) {
      var srow = this.skew[Math.floor((py - this.skewY) / SKEW_H)];
      if (px < GUTTER) return srow.name + ' (' + srow.kind + '): ' + srow.n + ' instances drawn, of ' + srow.count;
      var hits = this.findSkew(srow, this.timeAt(px), 4 * (this.v1 - this.v0) / this.plotW, 4);
      return hits.map(function (j) { return self.describeSkew(srow, j); }).join('\n');
    }
    if (px < GUTTER) {
      var lane = this.lanes.filter(function (l) { return py >= l.y && py < l.y + l.h; })[0];
      return lane ? lane.label : '';
    }
    var row = (this.rows || []).filter(function (r) { return py >= r.y && py < r.y + r.h; })[0];
    if (!row) return '';
    var t = this.timeAt(px), tol = 4 * (this.v1 - this.v0) / this.plotW;
    var unit = this.unit, tr = row.track;
    var inDetail = !this.bins || (t >= this.bins.w0 && t < this.bins.w1);
    var i = inDetail ? this.find(row, t, tol) : -1;
    if (i >= 0) {
      var cat = CATS[tr.c[i]];
      var head = tr.l ? this.labels[tr.l[i]].split('\t') : [cat, ''];
      var lines = [head[0], cat + (head[1] ? ' · ' + head[1] : '')];
      lines.push('start ' + fmtMs(tr.s[i] * unit, 1) + ', duration ' + fmtDur(tr.d[i] * unit));
      if (row.lane.wait && COMM_CODES.indexOf(tr.c[i]) >= 0) {
        // the device's wait parts inside this activity (other comm running beside it can hold some of them)
        var waited = overlap(row.lane.wait, tr.s[i], tr.s[i] + tr.d[i]);
        lines.push('waiting for the last rank ' + fmtDur(waited * unit) + ', moving bytes ' + fmtDur((tr.d[i] - waited) * unit));
      }
      return row.lane.label + '\n' + lines.join('\n');
    }
    if (this.bins && !inDetail && tr.bins) {
      var b = Math.floor((t - this.bins.o) / this.bins.w);
      var parts = Object.keys(tr.bins).map(function (c) {
        var v = tr.bins[c][b] || 0;
        return v ? CATS[c] + ' ' + Math.round(100 * v / 255) + '%' : '';
      }).filter(Boolean);
      var wb = row.lane.wait && row.lane.wait.bins ? row.lane.wait.bins[WAIT][b] || 0 : 0;
      if (wb && tr.codes.some(function (c) { return COMM_CODES.indexOf(c) >= 0; })) {
        parts.push('of it waiting for the last rank ' + Math.round(100 * wb / 255) + '%');
      }
      var bw = this.bins.w * unit;
      return row.lane.label + '\nbin ' + fmtMs((this.bins.o + b * this.bins.w) * unit, 1) + ' + ' + fmtDur(Math.round(bw)) + ': ' +
        (parts.join(', ') || 'idle') + '\n(zoom into the detail window for single kernels)';
    }
    return row.lane.label + ' · ' + tr.name + '\n' + fmtMs(t * unit, 1) + ': nothing here';
  };

  Timeline.prototype.bind = function () {
    var self = this, c = this.canvas, drag = null;
    c.addEventListener('wheel', function (e) {
      e.preventDefault();
      var dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
      self.zoom(Math.exp(dy * 0.0015), e.offsetX);
    }, { passive: false });
    c.addEventListener('pointerdown', function (e) {
      drag = { x: e.clientX, v0: self.v0, v1: self.v1 };
      try { c.setPointerCapture(e.pointerId); } catch (err) { /* synthetic pointer: no capture needed */ }
      c.classList.add('drag');
      self.tip.hidden = true;
    });
    c.addEventListener('pointermove', function (e) {
      if (drag) {
        var dt = (e.clientX - drag.x) * (drag.v1 - drag.v0) / self.plotW;
        self.v0 = drag.v0 - dt; self.v1 = drag.v1 - dt;
        self.clamp();
        self.schedule();
        return;
      }
      var text = self.describe(e.offsetX, e.offsetY);
      if (!text) { self.tip.hidden = true; return; }
      self.tip.textContent = text;
      self.tip.hidden = false;
      var left = e.offsetX + 14;
      if (left + 360 > self.W) left = Math.max(0, e.offsetX - 370);
      self.tip.style.left = left + 'px';
      self.tip.style.top = (c.offsetTop + e.offsetY + 14) + 'px';
    });
    function end(e) {
      if (!drag) return;
      drag = null;
      c.classList.remove('drag');
      try { c.releasePointerCapture(e.pointerId); } catch (err) { /* never captured */ }
    }
    c.addEventListener('pointerup', end);
    c.addEventListener('pointercancel', end);
    c.addEventListener('pointerleave', function () { self.tip.hidden = true; });
    c.addEventListener('dblclick', function () { self.reset(); self.schedule(); });
    this.root.querySelectorAll('button[data-act]').forEach(function (btn) {
      btn.addEventListener('click', function () {
        if (btn.dataset.act === 'detail' && self.bins) {
          var pad = (self.bins.w1 - self.bins.w0) * 0.02;
          self.v0 = self.bins.w0 - pad; self.v1 = self.bins.w1 + pad;
        } else {
          self.reset();
        }
        self.schedule();
      });
    });
  };

  var timelines = [];
  document.querySelectorAll('.timeline').forEach(function (root) {
    var input = DATA.inputs[Number(root.dataset.input)];
    try {
      timelines.push(new Timeline(root, input));
    } catch (err) {
      if (window.moeprofError) window.moeprofError('timeline ' + root.dataset.input + ': ' + (err && err.stack || err));
    }
  });
  var resizing = false;
  window.addEventListener('resize', function () {
    if (resizing) return;
    resizing = true;
    window.requestAnimationFrame(function () { resizing = false; timelines.forEach(function (t) { t.resize(); }); });
  });


  // spec §11's heatmaps: tokens per layer x expert, bytes per sender x receiver; values as the analysis holds
  // them (null: not recorded, drawn hatched), marginal bars for the row and column sums where given
  var HEAT_LO = [247, 251, 255], HEAT_HI = [8, 48, 107];
  function heatColor(f) {
    var c = HEAT_LO.map(function (lo, k) { return Math.round(lo + (HEAT_HI[k] - lo) * f); });
    return 'rgb(' + c.join(',') + ')';
  }
  function fmtNum(v, unit) {
    if (v === null || v === undefined) return '?';
    if (unit === 'bytes') {
      var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
      while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
      return (i ? v.toFixed(1) : String(Math.round(v))) + ' ' + units[i];
    }
    var digits = Math.abs(v - Math.round(v)) < 0.05 ? 0 : 1;
    return v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }) + ' ' + unit;
  }
  function Heatmap(fig, map) {
    this.fig = fig; this.map = map;
    this.canvas = fig.querySelector('canvas');
    this.tip = fig.querySelector('.tip');
    var nr = map.rows.length, nc = map.cols.length;
    var avail = Math.max(300, (fig.parentElement.clientWidth || 900) - 40);
    this.left = 8 + 7 * Math.max.apply(null, map.rows.map(function (r) { return r.length; }).concat([map.row_name.length]));
    this.top = 34;
    this.margin = map.row_sums ? 90 : 10;
    this.cell = Math.max(6, Math.min(32, Math.floor((avail - this.left - this.margin) / Math.max(nc, 1))));
    this.cellH = Math.max(this.cell, 14);
    this.W = this.left + nc * this.cell + this.margin;
    this.H = this.top + nr * this.cellH + (map.col_sums ? 70 : 12);
    var max = 0, known = 0, unknown = 0;
    map.values.forEach(function (row) { row.forEach(function (v) {
      if (v === null || v === undefined) unknown++; else { known++; if (v > max) max = v; } }); });
    this.max = max; this.known = known; this.unknown = unknown;
    this.draw();
    var self = this;
    this.canvas.addEventListener('pointermove', function (e) {
      var text = self.describe(e.offsetX, e.offsetY);
      if (!text) { self.tip.hidden = true; return; }
      self.tip.textContent = text;
      self.tip.hidden = false;
      self.tip.style.left = Math.min(e.offsetX + 14, self.W - 200) + 'px';
      self.tip.style.top = (self.canvas.offsetTop + e.offsetY + 14) + 'px';
    });
    this.canvas.addEventListener('pointerleave', function () { self.tip.hidden = true; });
  }
  Heatmap.prototype.cellAt = function (x, y) {
    var j = Math.floor((x - this.left) / this.cell), i = Math.floor((y - this.top) / this.cellH);
    if (i < 0 || j < 0 || i >= this.map.rows.length || j >= this.map.cols.length) return null;
    return [i, j];
  };
  Heatmap.prototype.describe = function (x, y) {
    var at = this.cellAt(x, y);
    return at ? this.text(at[0], at[1]) : '';
  };
  Heatmap.prototype.text = function (i, j) {
    var m = this.map, v = m.values[i][j];
    var head = m.row_name + ' ' + m.rows[i].replace(/^layer /, '') + ', ' + m.col_name + ' ' + m.cols[j] + ': ';
    if (v === null || v === undefined) return head + 'not recorded (the split list was cut or dropped)';
    var text = head + fmtNum(v, m.unit);
    if (m.means && m.means[i]) text += ' (' + (v / m.means[i]).toFixed(2) + 'x the layer\'s mean)';
    if (m.row_sums) text += '\n' + m.row_name + ' total ' + fmtNum(m.row_sums[i], m.unit) + ', ' + m.col_name +
      ' total ' + fmtNum(m.col_sums[j], m.unit);
    return text;
  };
  Heatmap.prototype.draw = function () {
    var m = this.map, c = this.canvas, dpr = window.devicePixelRatio || 1;
    c.width = Math.round(this.W * dpr); c.height = Math.round(this.H * dpr);
    c.style.width = this.W + 'px'; c.style.height = this.H + 'px';
    var ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.W, this.H);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#616161';
    ctx.textBaseline = 'middle';
    ctx.fillText(m.row_name + ' \u2193  ' + m.col_name + ' \u2192', 4, 10);
    var self = this, cw = this.cell, ch = this.cellH, every = Math.ceil(14 / cw);
    m.cols.forEach(function (name, j) {
      if (j % every) return;
      ctx.fillText(name, self.left + j * cw + 1, 26);
    });
    var painted = 0;
    m.rows.forEach(function (name, i) {
      var y = self.top + i * ch;
      ctx.fillStyle = '#212121';
      ctx.fillText(name, 4, y + ch / 2);
      m.values[i].forEach(function (v, j) {
        var x = self.left + j * cw;
        if (v === null || v === undefined) {
          ctx.fillStyle = '#e0e0e0'; ctx.fillRect(x, y, cw - 1, ch - 1);
          ctx.strokeStyle = '#9e9e9e'; ctx.beginPath(); ctx.moveTo(x, y + ch - 1); ctx.lineTo(x + cw - 1, y); ctx.stroke();
          return;
        }
        ctx.fillStyle = heatColor(self.max > 0 ? v / self.max : 0);
        ctx.fillRect(x, y, cw - 1, ch - 1);
        painted++;
      });
      (m.dead && m.dead[i] || []).forEach(function (j) {
        var x = self.left + j * cw;
        ctx.strokeStyle = '#9e9e9e'; ctx.beginPath();
        ctx.moveTo(x + 2, y + 2); ctx.lineTo(x + cw - 3, y + ch - 3); ctx.moveTo(x + cw - 3, y + 2); ctx.lineTo(x + 2, y + ch - 3);
        ctx.stroke();
      });
    });
    ctx.lineWidth = 2; ctx.strokeStyle = '#e53935';
    (m.hot || []).forEach(function (cols, i) { cols.forEach(function (j) {
      ctx.strokeRect(self.left + j * cw + 1, self.top + i * ch + 1, cw - 3, ch - 3); }); });
    (m.flag_cells || []).forEach(function (p) {
      ctx.strokeRect(self.left + p[1] * cw + 1, self.top + p[0] * ch + 1, cw - 3, ch - 3); });
    (m.flag_rows || []).forEach(function (i) { ctx.strokeRect(self.left, self.top + i * ch, m.cols.length * cw - 1, ch - 1); });
    (m.flag_cols || []).forEach(function (j) { ctx.strokeRect(self.left + j * cw, self.top, cw - 1, m.rows.length * ch - 1); });
    ctx.lineWidth = 1;
    // the row and column sums: bars at the right and the bottom, each scaled to its largest
    if (m.row_sums) {
      var rmax = Math.max.apply(null, m.row_sums.map(function (v) { return v || 0; })) || 1;
      var x0 = this.left + m.cols.length * cw + 6;
      m.row_sums.forEach(function (v, i) {
        if (v === null || v === undefined) return;
        ctx.fillStyle = '#78909c'; ctx.fillRect(x0, self.top + i * ch + 2, 60 * v / rmax, ch - 5);
      });
      ctx.fillStyle = '#616161'; ctx.fillText('sent', x0, 26);
    }
    if (m.col_sums) {
      var cmax = Math.max.apply(null, m.col_sums.map(function (v) { return v || 0; })) || 1;
      var y0 = this.top + m.rows.length * ch + 4;
      m.col_sums.forEach(function (v, j) {
        if (v === null || v === undefined) return;
        var h = 50 * v / cmax;
        ctx.fillStyle = '#78909c'; ctx.fillRect(self.left + j * cw + 1, y0, cw - 3, h);
      });
      ctx.fillStyle = '#616161'; ctx.fillText('received', 4, y0 + 8);
    }
    this.painted = painted;
  };

  var heatmaps = [];
  document.querySelectorAll('figure.heatmap').forEach(function (fig) {
    var maps = DATA.inputs[Number(fig.dataset.input)].heatmaps || [];
    try {
      heatmaps.push(new Heatmap(fig, maps[Number(fig.dataset.map)]));
    } catch (err) {
      if (window.moeprofError) window.moeprofError('heatmap ' + fig.dataset.map + ': ' + (err && err.stack || err));
    }
  });

  // "#selftest": drive each timeline through synthetic wheel, drag, hover and double-click events and
  // write what happened into the DOM, so a headless browser test covers the interaction code too
  function selftest() {
    var results = timelines.map(function (t) {
      var c = t.canvas, r = c.getBoundingClientRect();
      var cx = r.left + GUTTER + t.plotW / 2, cy = r.top + AXIS + 6;
      var full = t.v1 - t.v0;
      c.dispatchEvent(new WheelEvent('wheel', { deltaY: -600, clientX: cx, clientY: cy, bubbles: true, cancelable: true }));
      var zoomed = t.v1 - t.v0 < full * 0.9;
      var before = t.v0;
      c.dispatchEvent(new PointerEvent('pointerdown', { clientX: cx, clientY: cy, pointerId: 1, bubbles: true }));
      c.dispatchEvent(new PointerEvent('pointermove', { clientX: cx - 100, clientY: cy, pointerId: 1, bubbles: true }));
      c.dispatchEvent(new PointerEvent('pointerup', { clientX: cx - 100, clientY: cy, pointerId: 1, bubbles: true }));
      var panned = t.v0 > before;
      c.dispatchEvent(new MouseEvent('dblclick', { clientX: cx, clientY: cy, bubbles: true }));
      var reset = t.v0 === 0 && t.v1 === t.span;
      t.draw();
      // hover the middle of the first raw event of the first track that has one
      var hovered = '';
      var row = (t.rows || []).filter(function (rw) { return rw.track.n > 0; })[0];
      if (row) {
        var tr = row.track;
        var px = t.xOf(tr.s[0] + tr.d[0] / 2);
        c.dispatchEvent(new PointerEvent('pointermove', {
          clientX: r.left + px, clientY: r.top + row.y + row.h / 2, pointerId: 2, bubbles: true }));
        hovered = t.tip.hidden ? '' : t.tip.textContent;
      }
      t.tip.hidden = true;
      // the ledger's parts, decoded here: per lane the wait segments' ns and their binned coverage's ns,
      // and for each skew row the hover text of its widest instance
      var wait = {};
      t.lanes.forEach(function (lane) {
        var w = lane.ownWait;
        if (!w) return;
        var raw = 0, binned = 0;
        for (var i = 0; i < w.n; i++) raw += w.d[i];
        if (w.bins && t.bins) {
          var b = w.bins[WAIT];
          for (i = 0; i < b.length; i++) binned += b[i];
          binned = binned / 255 * t.bins.w * t.unit;
        }
        wait[lane.label] = { raw: raw * t.unit, binned: binned };
      });
      var skew = t.skew.map(function (sr, i) {
        var widest = 0, spread = 0;
        for (var j = 0; j < sr.n; j++) { spread += sr.d[j]; if (sr.d[j] > sr.d[widest]) widest = j; }
        var text = '';
        if (sr.n) {
          var sx = t.xOf(sr.s[widest] + sr.d[widest] / 2);
          c.dispatchEvent(new PointerEvent('pointermove', {
            clientX: r.left + sx, clientY: r.top + t.skewY + i * SKEW_H + SKEW_H / 2, pointerId: 3, bubbles: true }));
          text = t.tip.hidden ? '' : t.tip.textContent;
          t.tip.hidden = true;
        }
        return { name: sr.name, n: sr.n, spread: spread * t.unit, widest: widest, hovered: text };
      });
      return {
        zoomed: zoomed, panned: panned, reset: reset, hovered: hovered,
        wait: wait, paled: t.paled, skew: skew, skewBars: t.skewBars || 0, critical: t.critical || 0
      };
    });
    var ok = results.every(function (x) {
      var waits = Object.keys(x.wait).some(function (k) { return x.wait[k].raw + x.wait[k].binned > 0; });
      return x.zoomed && x.panned && x.reset && x.hovered && (!waits || x.paled > 0) &&
        x.skew.every(function (sk) { return sk.n === 0 || sk.hovered; });
    });
    status.setAttribute('data-selftest', ok ? 'ok' : 'failed');
    status.setAttribute('data-selftest-detail', JSON.stringify(results));
  }
  if (window.location.hash === '#selftest') {
    try { selftest(); } catch (err) { if (window.moeprofError) window.moeprofError('selftest: ' + (err && err.stack || err)); }
  }

  // what a headless check reads back from the DOM
  var lanes = timelines.reduce(function (n, t) { return n + t.drawn; }, 0);
  var inked = timelines.reduce(function (n, t) { return n + t.inked(); }, 0);
  status.setAttribute('data-timelines', String(timelines.length));
  status.setAttribute('data-lanes', String(lanes));
  status.setAttribute('data-inked', String(inked));
  status.setAttribute('data-critical', String(timelines.reduce(function (n, t) { return n + (t.critical || 0); }, 0)));
  // per heatmap: cells painted, cells not recorded, the largest value, and the hover text of its largest cell
  status.setAttribute('data-heatmaps', JSON.stringify(heatmaps.map(function (h) {
    var best = null;
    h.map.values.forEach(function (row, i) { row.forEach(function (v, j) {
      if (v !== null && v !== undefined && (best === null || v > h.map.values[best[0]][best[1]])) best = [i, j]; }); });
    var hover = '';
    if (best) {
      var r = h.canvas.getBoundingClientRect();
      h.canvas.dispatchEvent(new PointerEvent('pointermove', { clientX: r.left + h.left + best[1] * h.cell + h.cell / 2,
        clientY: r.top + h.top + best[0] * h.cellH + h.cellH / 2, pointerId: 3, bubbles: true }));
      hover = h.tip.hidden ? '' : h.tip.textContent;
      h.tip.hidden = true;
    }
    return { kind: h.map.kind, painted: h.painted, unknown: h.unknown, max: h.max, hover: hover };
  })));
  var failed = document.documentElement.hasAttribute('data-errors');
  status.setAttribute('data-ok', failed ? 'error' : '1');
  status.textContent = failed ? 'the timeline script reported errors (listed below)' :
    'timeline: ' + lanes + ' lane(s) drawn';
})();
