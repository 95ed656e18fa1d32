/* trio-pty monitor: watch and drive every session of a trio-pty server.
 *
 * Plain browser JavaScript, no build step. Talks JSON-RPC 2.0 to /rpc on the same origin
 * (docs/protocol.md); renders with xterm.js (window.Terminal, window.FitAddon).
 *
 * - Token: read from ?token= once, kept in this closure only (no cookie, no storage), removed
 *   from the address bar, sent as ?token= on the WebSocket URL (browsers cannot set headers).
 * - Sessions: pty.list {all_owners: true} every second, filtered by ?owner=a,b when given.
 * - The selected session is attached as a driver while it runs: xterm.js answers the
 *   program's terminal queries, so the server stops answering them. Output that was produced
 *   before the attachment is replayed without answering the queries in it a second time.
 * - Reconnect: after a dropped connection the page reattaches with offset = the next_offset
 *   of the last chunk it rendered, so nothing is repeated or lost.
 */
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const LIST_INTERVAL_MS = 1000;
  const RETRY_MIN_MS = 250;
  const RETRY_MAX_MS = 5000;
  const WRITE_BATCH_CHARS = 16384;
  const SIGNALS = { 1: 'SIGHUP', 2: 'SIGINT', 3: 'SIGQUIT', 6: 'SIGABRT', 9: 'SIGKILL', 13: 'SIGPIPE', 15: 'SIGTERM' };

  // ---- the URL: take the token, keep the owner filter, clean the address bar
  const query = new URLSearchParams(location.search);
  let token = query.get('token') || '';
  query.delete('token');
  const ownerFilter = query.getAll('owner')
    .flatMap((value) => value.split(','))
    .map((value) => value.trim())
    .filter(Boolean);
  const remaining = query.toString();
  history.replaceState(null, '', location.pathname + (remaining ? '?' + remaining : '') + location.hash);

  const state = {
    rpc: null,
    connected: false,
    everConnected: false,
    reconnects: 0,
    retryMs: RETRY_MIN_MS,
    nextDelayMs: null,
    retryTimer: null,
    listing: false,
    sessions: [],
    selected: null,
    violations: [],
  };

  document.addEventListener('securitypolicyviolation', (event) => {
    state.violations.push(`${event.violatedDirective} ${event.blockedURI}`);
  });

  // ---- xterm.js under a strict CSP
  //
  // xterm.js's DOM renderer writes its theme and cell size rules into <style> elements and
  // true colours into style attributes; a CSP without 'unsafe-inline' blocks both (no colours,
  // no cursor). Rules set through the CSSOM are not inline styles, so route them there: a
  // <style> asked for by script becomes an inert holder whose text fills a constructed
  // stylesheet, and setAttribute('style') becomes style.cssText. Markup cannot use either
  // path, so the policy loses nothing: only this page's own scripts get styles in.
  function routeScriptStylesThroughCssom() {
    const createElement = Document.prototype.createElement;
    Document.prototype.createElement = function (name, options) {
      if (String(name).toLowerCase() !== 'style') return createElement.call(this, name, options);
      const doc = this;
      const holder = createElement.call(doc, 'template');
      const sheet = new CSSStyleSheet();
      let text = '';
      Object.defineProperty(holder, 'textContent', {
        get: () => text,
        set: (value) => {
          text = String(value);
          sheet.replaceSync(text);
        },
      });
      const remove = holder.remove;
      holder.remove = function () {
        doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter((s) => s !== sheet);
        remove.call(this);
      };
      doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
      return holder;
    };
    const setAttribute = Element.prototype.setAttribute;
    Element.prototype.setAttribute = function (name, value) {
      if (String(name).toLowerCase() === 'style' && this.style) {
        this.style.cssText = String(value);
        return;
      }
      setAttribute.call(this, name, value);
    };
  }

  // ---- JSON-RPC over one WebSocket

  class RpcError extends Error {
    constructor(error) {
      super(error.message);
      this.code = error.code;
      this.data = error.data || {};
      this.kind = this.data.kind || null;
    }
  }

  class Rpc {
    constructor(url, handlers) {
      this.url = url;
      this.handlers = handlers;
      this.nextId = 0;
      this.pending = new Map();
      this.ws = null;
      this.open = false;
    }

    connect() {
      return new Promise((resolve, reject) => {
        const ws = new WebSocket(this.url);
        this.ws = ws;
        ws.onopen = () => {
          this.open = true;
          resolve();
        };
        ws.onmessage = (event) => this.receive(event.data);
        ws.onerror = () => {};
        ws.onclose = (event) => {
          const wasOpen = this.open;
          this.open = false;
          for (const { reject: fail } of this.pending.values()) fail(new Error('connection closed'));
          this.pending.clear();
          if (wasOpen) this.handlers.closed(this, event);
          else reject(new Error('could not connect'));
        };
      });
    }

    receive(text) {
      let message;
      try {
        message = JSON.parse(text);
      } catch (error) {
        return;
      }
      if (typeof message.method === 'string') {
        this.handlers.notification(message.method, message.params || {});
        return;
      }
      const call = this.pending.get(message.id);
      if (!call) return;
      this.pending.delete(message.id);
      if (message.error) call.reject(new RpcError(message.error));
      else call.resolve(message.result);
    }

    call(method, params) {
      if (!this.open) return Promise.reject(new Error('not connected'));
      const id = ++this.nextId;
      return new Promise((resolve, reject) => {
        this.pending.set(id, { resolve, reject });
        this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params: params || {} }));
      });
    }

    close(code, reason) {
      if (this.ws) this.ws.close(code, reason);
    }
  }

  // ---- small helpers

  function base64Bytes(text) {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  // pty.write with escapes: true: a backslash is \\, NUL (which plain text may not carry) \x00.
  function escapeText(text) {
    return text.replace(/\\/g, '\\\\').replace(/\u0000/g, '\\x00');
  }

  // xterm.js onBinary: one character per byte.
  function escapeBinary(text) {
    let out = '';
    for (let i = 0; i < text.length; i++) out += '\\x' + (text.charCodeAt(i) & 0xff).toString(16).padStart(2, '0');
    return out;
  }

  function quoteArg(arg) {
    return /^[A-Za-z0-9_./:=@%+,-]+$/.test(arg) ? arg : "'" + arg.replace(/'/g, "'\\''") + "'";
  }

  // "a 'b c' \"d\"" -> ["a", "b c", "d"]: whitespace separates, quotes group, \ escapes.
  function splitArgs(text) {
    const args = [];
    let current = null;
    let quote = null;
    for (let i = 0; i < text.length; i++) {
      const ch = text[i];
      if (quote) {
        if (ch === quote) quote = null;
        else if (ch === '\\' && quote === '"' && i + 1 < text.length) current += text[++i];
        else current += ch;
      } else if (ch === "'" || ch === '"') {
        quote = ch;
        current = current === null ? '' : current;
      } else if (ch === '\\' && i + 1 < text.length) {
        current = (current === null ? '' : current) + text[++i];
      } else if (/\s/.test(ch)) {
        if (current !== null) args.push(current);
        current = null;
      } else {
        current = (current === null ? '' : current) + ch;
      }
    }
    if (quote) throw new Error('unclosed quote in the arguments');
    if (current !== null) args.push(current);
    return args;
  }

  function age(createdAt) {
    let seconds = Math.max(0, Math.floor(Date.now() / 1000 - createdAt));
    if (seconds < 60) return `${seconds}s`;
    let minutes = Math.floor(seconds / 60);
    seconds %= 60;
    if (minutes < 60) return `${minutes}m ${seconds}s`;
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    if (hours < 48) return `${hours}h ${minutes}m`;
    return `${Math.floor(hours / 24)}d ${hours % 24}h`;
  }

  function exitText(info) {
    let text = '';
    if (info.exit_code !== null && info.exit_code !== undefined) text = String(info.exit_code);
    else if (info.exit_signal !== null && info.exit_signal !== undefined) {
      text = SIGNALS[info.exit_signal] || `signal ${info.exit_signal}`;
    }
    if (info.timed_out) text += ' (timeout)';
    return text || '\u2014';
  }

  function isLive(info) {
    return info.status === 'running';
  }

  function badge(element, info) {
    element.textContent = info.status;
    element.className = 'badge ' + info.status;
    if (info.status === 'exited' && info.exit_code !== 0) element.classList.add('failed');
  }

  function cell(text, className) {
    const td = document.createElement('td');
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function setConnection(name, text) {
    const pill = $('conn');
    pill.dataset.state = name;
    pill.textContent = text || name;
  }

  function note(text) {
    $('term-note').textContent = text || '';
  }

  // ---- one attached session

  class View {
    constructor(info) {
      this.id = info.id;
      this.owner = info.owner;
      this.info = info;
      this.nextOffset = null; // next_offset of the last chunk rendered: where a resume starts
      this.historyEnd = 0; // output before this was produced before the current attachment
      this.quiet = 0; // history writes in flight: xterm's query answers are not sent then
      this.attached = false;
      this.removed = false;
      this.queue = []; // escaped input not sent yet
      this.writing = false;
      this.resizing = false;
      this.sentSize = null;
      this.disposed = false;
      const box = $('terminal');
      box.replaceChildren();
      this.term = new Terminal({
        cursorBlink: true,
        scrollback: 10000,
        fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace',
        fontSize: 14,
        theme: { background: '#000000', foreground: '#d1d7e0', cursor: '#3fb950' },
      });
      this.fit = new FitAddon.FitAddon();
      this.term.loadAddon(this.fit);
      this.term.open(box);
      this.term.onData((data) => this.input(escapeText(data)));
      this.term.onBinary((data) => this.input(escapeBinary(data)));
      this.term.onResize(() => this.resized());
      this.fitNow();
      this.term.options.disableStdin = !isLive(info);
    }

    dispose() {
      this.disposed = true;
      this.term.dispose();
    }

    fitNow() {
      if (this.disposed) return;
      try {
        this.fit.fit();
      } catch (error) {
        return; // not laid out yet
      }
      this.showSize();
    }

    showSize() {
      $('term-size').textContent = `${this.term.cols}\u00d7${this.term.rows}`;
    }

    async attach() {
      const rpc = state.rpc;
      if (!rpc || !state.connected || this.removed) return;
      const driver = isLive(this.info);
      const params = { id: this.id, owner: this.owner, driver };
      if (this.nextOffset !== null) params.offset = this.nextOffset;
      // Where the output ended just before attaching: what comes before it was produced
      // while this page was not the driver, so its terminal queries were answered already.
      // A lower bound of the real boundary, so a live query is never left unanswered.
      let before = 0;
      let first;
      try {
        const listed = await rpc.call('pty.list', { owner: this.owner });
        const info = listed.sessions.find((s) => s.id === this.id);
        if (info) before = info.byte_count;
        first = await rpc.call('pty.attach', params);
      } catch (error) {
        if (error.kind === 'session_not_found') this.gone();
        else if (rpc === state.rpc) note(`attach failed: ${error.message}`);
        return;
      }
      if (state.selected !== this || state.rpc !== rpc) {
        rpc.call('pty.detach', { id: this.id, owner: this.owner }).catch(() => {});
        return;
      }
      this.attached = true;
      this.historyEnd = Math.max(before, first.next_offset);
      this.accept(first);
      if (driver) {
        this.sentSize = null;
        this.sendSize();
      }
    }

    // One chunk, from the attach response or a pty.output notification.
    accept(chunk) {
      let data = base64Bytes(chunk.data);
      if (chunk.gap && this.nextOffset !== null) {
        this.term.write('\r\n\x1b[33m[trio-pty: output was dropped here: this view fell behind the buffer]\x1b[0m\r\n');
      } else if (this.nextOffset !== null) {
        if (chunk.next_offset <= this.nextOffset) return; // seen already
        if (chunk.offset < this.nextOffset) data = data.subarray(this.nextOffset - chunk.offset);
      }
      this.nextOffset = chunk.next_offset;
      if (!data.length) return;
      const start = chunk.next_offset - data.length;
      const history = Math.max(0, Math.min(data.length, this.historyEnd - start));
      if (history > 0) {
        this.quiet++;
        this.term.write(data.subarray(0, history), () => { this.quiet--; });
      }
      if (history < data.length) this.term.write(data.subarray(history));
    }

    exited(event) {
      this.info = Object.assign({}, this.info, {
        status: event.exit_signal !== null && event.exit_code === null ? 'killed' : 'exited',
        exit_code: event.exit_code,
        exit_signal: event.exit_signal,
        timed_out: event.timed_out,
      });
      this.update(this.info);
    }

    update(info) {
      const wasLive = isLive(this.info);
      this.info = info;
      this.term.options.disableStdin = !isLive(info);
      if (wasLive && !isLive(info)) this.queue = [];
      toolbar();
    }

    gone() {
      this.removed = true;
      this.attached = false;
      this.term.options.disableStdin = true;
      toolbar();
    }

    input(escaped) {
      if (this.quiet > 0 || !this.attached || !isLive(this.info) || !state.connected) return;
      this.queue.push(escaped);
      this.flush();
    }

    // Writes go one at a time (requests on a connection run concurrently on the server, so
    // only this keeps keystrokes in order), batching whatever was typed meanwhile.
    async flush() {
      if (this.writing) return;
      this.writing = true;
      try {
        while (this.queue.length && state.connected && isLive(this.info)) {
          let data = '';
          while (this.queue.length && data.length + this.queue[0].length <= WRITE_BATCH_CHARS) {
            data += this.queue.shift();
          }
          if (!data) data = this.queue.shift();
          await state.rpc.call('pty.write', { id: this.id, owner: this.owner, data, escapes: true });
        }
      } catch (error) {
        this.queue = [];
        note(`input not sent: ${error.message}`);
      } finally {
        this.writing = false;
      }
    }

    resized() {
      this.showSize();
      if (this.attached && isLive(this.info)) this.sendSize();
    }

    // Last resizer wins on the server; here, only one resize is in flight and the last size
    // asked for is the one sent after it.
    async sendSize() {
      if (this.resizing) return;
      this.resizing = true;
      try {
        while (state.connected && this.attached && isLive(this.info)) {
          const size = `${this.term.rows}x${this.term.cols}`;
          if (size === this.sentSize) break;
          await state.rpc.call('pty.resize', { id: this.id, owner: this.owner, rows: this.term.rows, cols: this.term.cols });
          this.sentSize = size;
        }
      } catch (error) {
        if (error.kind !== 'not_running') note(`resize failed: ${error.message}`);
      } finally {
        this.resizing = false;
      }
    }
  }

  // ---- the session list

  function visible(sessions) {
    if (!ownerFilter.length) return sessions;
    return sessions.filter((info) => ownerFilter.includes(info.owner));
  }

  function renderList() {
    const body = $('sessions').tBodies[0];
    const selectedId = state.selected ? state.selected.id : null;
    const rows = state.sessions.map((info) => {
      const row = document.createElement('tr');
      row.dataset.id = info.id;
      row.tabIndex = 0;
      row.title = info.description;
      if (info.id === selectedId) row.classList.add('selected');
      const status = document.createElement('span');
      badge(status, info);
      const statusCell = document.createElement('td');
      statusCell.className = 'status';
      statusCell.append(status);
      row.append(
        cell(info.id, 'id'),
        cell(info.owner, 'owner'),
        cell(info.title || info.description, 'title' + (info.title ? '' : ' muted')),
        cell([info.command, ...info.args].map(quoteArg).join(' '), 'cmd'),
        statusCell,
        cell(exitText(info), 'exit'),
        cell(age(info.created_at), 'age'),
        cell(String(info.line_count), 'lines num'),
      );
      row.addEventListener('click', () => select(info));
      row.addEventListener('keydown', (event) => {
        if (event.key === 'Enter') select(info);
      });
      return row;
    });
    body.replaceChildren(...rows);
    $('empty').hidden = rows.length > 0;
    const total = state.sessions.length;
    const live = state.sessions.filter(isLive).length;
    $('count').textContent = total ? `${total} (${live} running)` : '';
  }

  async function refresh() {
    const rpc = state.rpc;
    if (!rpc || !state.connected || state.listing) return;
    state.listing = true;
    try {
      const result = await rpc.call('pty.list', { all_owners: true });
      state.sessions = visible(result.sessions);
    } catch (error) {
      return;
    } finally {
      state.listing = false;
    }
    const view = state.selected;
    if (view) {
      const info = state.sessions.find((s) => s.id === view.id);
      if (info) view.update(info);
      else if (!view.removed) view.gone();
    }
    renderList();
  }

  function toolbar() {
    const view = state.selected;
    const status = $('term-status');
    if (!view) {
      $('term-title').textContent = 'No session selected';
      status.hidden = true;
      $('kill').disabled = $('cleanup').disabled = true;
      return;
    }
    const info = view.info;
    $('term-title').textContent = info.title ? `${info.id} \u00b7 ${info.title}` : info.id;
    status.hidden = false;
    badge(status, info);
    if (view.removed) {
      status.textContent = 'removed';
      note('this session is gone from the server; its last output stays here');
    } else if (!isLive(info)) {
      note(`ended: exit ${exitText(info)}; the output stays readable`);
    } else if (!state.connected) {
      note('disconnected: input is paused');
    } else {
      note(`owner ${info.owner}`);
    }
    $('kill').disabled = view.removed || !isLive(info) || !state.connected;
    $('cleanup').disabled = view.removed || !state.connected;
  }

  function select(info) {
    if (state.selected && state.selected.id === info.id && !state.selected.removed) return;
    const old = state.selected;
    if (old) {
      if (old.attached && state.connected) {
        state.rpc.call('pty.detach', { id: old.id, owner: old.owner }).catch(() => {});
      }
      old.dispose();
    }
    state.selected = new View(info);
    renderList();
    toolbar();
    state.selected.attach();
    state.selected.term.focus();
  }

  async function kill(cleanup) {
    const view = state.selected;
    if (!view || !state.connected) return;
    $('kill').disabled = $('cleanup').disabled = true;
    note(cleanup ? 'killing and cleaning up\u2026' : 'killing\u2026');
    try {
      const info = await state.rpc.call('pty.kill', { id: view.id, owner: view.owner, cleanup });
      if (cleanup) view.gone();
      else view.update(info);
    } catch (error) {
      note(`kill failed: ${error.message}`);
    }
    await refresh();
    toolbar();
  }

  async function spawn(event) {
    event.preventDefault();
    const form = event.target;
    const error = $('spawn-error');
    error.textContent = '';
    if (!state.connected) {
      error.textContent = 'not connected';
      return;
    }
    let args;
    try {
      args = splitArgs(form.elements.args.value);
    } catch (problem) {
      error.textContent = problem.message;
      return;
    }
    const size = state.selected ? { rows: state.selected.term.rows, cols: state.selected.term.cols } : {};
    const params = Object.assign({
      command: form.elements.command.value.trim(),
      args,
      description: form.elements.description.value,
      owner: form.elements.owner.value.trim() || ownerFilter[0] || 'default',
    }, size);
    try {
      const info = await state.rpc.call('pty.spawn', params);
      form.elements.command.value = form.elements.args.value = form.elements.description.value = '';
      await refresh();
      select(info);
    } catch (problem) {
      error.textContent = problem.kind ? `${problem.message} [${problem.kind}]` : problem.message;
    }
  }

  // ---- the connection

  const handlers = {
    notification(method, params) {
      const view = state.selected;
      if (method === 'pty.output') {
        if (view && view.attached && params.id === view.id) view.accept(params);
      } else if (method === 'pty.exited') {
        if (view && params.id === view.id) view.exited(params);
        refresh();
      }
    },
    closed(rpc) {
      if (state.rpc !== rpc) return;
      state.rpc = null;
      state.connected = false;
      if (state.selected) state.selected.attached = false;
      setConnection('reconnecting', 'reconnecting\u2026');
      toolbar();
      scheduleReconnect();
    },
  };

  function scheduleReconnect() {
    clearTimeout(state.retryTimer);
    let delay = state.retryMs;
    if (state.nextDelayMs !== null) {
      delay = state.nextDelayMs;
      state.nextDelayMs = null;
    }
    state.retryMs = Math.min(state.retryMs * 2, RETRY_MAX_MS);
    state.retryTimer = setTimeout(connect, delay);
  }

  async function connect() {
    clearTimeout(state.retryTimer);
    if (!token) {
      showAuth();
      return;
    }
    setConnection(state.everConnected ? 'reconnecting' : 'connecting', state.everConnected ? 'reconnecting\u2026' : 'connecting\u2026');
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const rpc = new Rpc(`${scheme}//${location.host}/rpc?token=${encodeURIComponent(token)}`, handlers);
    try {
      await rpc.connect();
    } catch (error) {
      if (!state.everConnected) {
        setConnection('offline', 'not connected');
        showAuth('Could not connect: the token is wrong, or the server is not running.');
      } else {
        scheduleReconnect();
      }
      return;
    }
    if (state.everConnected) state.reconnects++;
    state.rpc = rpc;
    state.connected = true;
    state.everConnected = true;
    state.retryMs = RETRY_MIN_MS;
    setConnection('connected');
    $('auth').hidden = true;
    await refresh();
    toolbar();
    if (state.selected && !state.selected.removed) state.selected.attach();
  }

  function showAuth(message) {
    if (message) $('auth-message').textContent = message;
    $('auth').hidden = false;
    $('auth-form').elements.token.focus();
  }

  // ---- start

  function start() {
    $('owners').textContent = ownerFilter.length ? `owners: ${ownerFilter.join(', ')}` : 'all owners';
    if (ownerFilter.length) $('spawn-form').elements.owner.placeholder = ownerFilter[0];
    $('kill').addEventListener('click', () => kill(false));
    $('cleanup').addEventListener('click', () => kill(true));
    $('spawn-form').addEventListener('submit', spawn);
    $('auth-form').addEventListener('submit', (event) => {
      event.preventDefault();
      token = event.target.elements.token.value.trim();
      event.target.elements.token.value = '';
      connect();
    });
    let frame = 0;
    new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => state.selected && state.selected.fitNow());
    }).observe($('terminal'));
    setInterval(() => {
      refresh();
    }, LIST_INTERVAL_MS);
    renderList();
    toolbar();
    connect();
  }

  // For tests and for poking at it from the console; nothing here reveals the token.
  window.trioPtyMonitor = Object.freeze({
    status() {
      const view = state.selected;
      return {
        connected: state.connected,
        reconnects: state.reconnects,
        sessions: state.sessions.map((info) => info.id),
        selected: view ? view.id : null,
        nextOffset: view ? view.nextOffset : null,
        rows: view ? view.term.rows : null,
        cols: view ? view.term.cols : null,
        violations: state.violations.slice(),
      };
    },
    // Every line of the selected terminal (scrollback included), right-trimmed.
    lines() {
      const view = state.selected;
      if (!view) return [];
      const buffer = view.term.buffer.active;
      const lines = [];
      for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
      while (lines.length && !lines[lines.length - 1]) lines.pop();
      return lines;
    },
    // Close the WebSocket as a network failure would (the page then reconnects by itself),
    // waiting `delayMs` before the first attempt.
    drop(delayMs) {
      if (!state.rpc) return false;
      state.nextDelayMs = typeof delayMs === 'number' ? delayMs : null;
      state.rpc.close(4000, 'dropped');
      return true;
    },
  });

  if (typeof Terminal === 'undefined' || typeof FitAddon === 'undefined') {
    setConnection('offline', 'xterm.js did not load');
    $('term-title').textContent = 'xterm.js did not load: no local copy, and the CDN is unreachable or was refused';
    return;
  }
  routeScriptStylesThroughCssom();
  start();
})();
