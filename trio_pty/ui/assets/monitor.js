/* trio-pty monitor: watch and drive every session of a trio-pty server.
 *
 * Plain browser JavaScript, no build step. Talks JSON-RPC 2.0 to /rpc on the same origin
 * (docs/protocol.md); renders with xterm.js (window.Terminal) and its fit, search and
 * unicode11 addons.
 *
 * - Token: read from ?token= once, kept in this closure only (no cookie, no storage), removed
 *   from the address bar, sent as ?token= on the WebSocket URL (browsers cannot set headers).
 * - Sessions: pty.list {all_owners: true} every second, filtered by ?owner=a,b when given;
 *   shown newest first (any column sorts), narrowed by the filter box.
 * - Terminals: each opened session gets its own xterm.js view (tabs, or all at once in a
 *   grid), attached as a driver while it runs: xterm.js answers the program's terminal
 *   queries, so the server stops answering them. An attachment starts from the session's
 *   state drawn from its screen model (pty.attach with redraw: history lines, the screen,
 *   its modes and title), then live output: no old byte, so no old terminal query, is
 *   replayed. A read-only token (server.info's scope) only watches: no driver, no keys,
 *   sizes, kill or spawn.
 * - Sizes: watching never resizes a session. A view shows the session at its own size
 *   (top-left, clipped by the view's box); only the focused view of the tabs layout, once
 *   the person typed into it or moved the splitter, fits its box and resizes the session
 *   (docs/monitor.md). A watched session that another client resized is drawn afresh.
 * - Reconnect: after a dropped connection every view attaches afresh (redrawn).
 */
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const LIST_INTERVAL_MS = 1000;
  const RETRY_MIN_MS = 250;
  const RETRY_MAX_MS = 5000;
  const WRITE_BATCH_CHARS = 16384;
  const MAX_VIEWS = 8; // open terminals; opening one more closes the least recently used
  const SPLIT_DEFAULT = 0.4; // the list's share of the height below the page header
  const SPLIT_MIN_LIST_PX = 90;
  const SPLIT_MIN_TERMINAL_PX = 140;
  const SPLIT_STEP = 0.05; // arrow keys on the splitter
  const SIGNALS = { 1: 'SIGHUP', 2: 'SIGINT', 3: 'SIGQUIT', 6: 'SIGABRT', 9: 'SIGKILL', 13: 'SIGPIPE', 15: 'SIGTERM' };
  const STATUS_ORDER = { running: 0, killing: 1, exited: 2, killed: 3 };
  const SEARCH_DECORATIONS = {
    matchBackground: '#5c4813',
    matchBorder: '#9e7a1c',
    matchOverviewRuler: '#9e7a1c',
    activeMatchBackground: '#d29922',
    activeMatchBorder: '#ffd866',
    activeMatchColorOverviewRuler: '#ffd866',
  };
  const SEARCH_LIMIT = 1000; // the search addon highlights at most this many matches
  const COMMANDS_LIMIT = 200; // a shell session's last commands shown beside its terminal

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
    sessions: [], // what pty.list returned, narrowed by ?owner=
    filter: parseFilter(''),
    sort: { key: 'age', ascending: true }, // youngest first
    views: new Map(), // session id -> View, in tab order
    active: null, // the View the toolbar, the search box and the keyboard act on
    layout: 'tabs',
    commands: false, // the server has shell sessions (pty.spawn_shell, pty.commands)
    readOnly: false, // the token may only watch (server.info's scope): no driver, no input
    uses: 0, // counts activations, for "least recently used"
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

  // Whether this page types into, resizes and drives the session: live, and a token that
  // may (a read-only one attaches without `driver` and only watches).
  function drives(info) {
    return isLive(info) && !state.readOnly;
  }

  // Red in the list: it ended with a non-zero exit, or by a signal.
  function failed(info) {
    return info.status === 'killed' || (info.status === 'exited' && info.exit_code !== 0);
  }

  function commandLine(info) {
    return [info.command, ...info.args].map(quoteArg).join(' ');
  }

  function badge(element, info) {
    element.textContent = info.status;
    element.className = 'badge ' + info.status;
    if (info.status === 'exited' && info.exit_code !== 0) element.classList.add('failed');
  }

  function setText(element, text) {
    if (element.textContent !== text) element.textContent = text;
  }

  function setConnection(name, text) {
    const pill = $('conn');
    pill.dataset.state = name;
    pill.textContent = text || name;
  }

  function note(text) {
    $('term-note').textContent = text || '';
  }

  // ---- the filter box: "owner:NAME status:STATUS words"
  //
  // Several owner: (or status:) terms are alternatives; the kinds of term and the words must
  // all match. Words are case-insensitive substrings of the id, owner, titles, description or
  // command line. status: is a status, or "failed" (red: non-zero exit, or killed), or
  // "ended" (anything but running and killing).
  function parseFilter(text) {
    const filter = { owners: [], statuses: [], words: [] };
    for (const term of text.split(/\s+/).filter(Boolean)) {
      const match = /^(owner|status):(.+)$/i.exec(term);
      if (!match) filter.words.push(term.toLowerCase());
      else if (match[1].toLowerCase() === 'owner') filter.owners.push(match[2]);
      else filter.statuses.push(match[2].toLowerCase());
    }
    return filter;
  }

  function hasStatus(info, status) {
    if (status === 'failed') return failed(info);
    if (status === 'ended') return info.status === 'exited' || info.status === 'killed';
    return info.status === status;
  }

  function matchesFilter(info, filter) {
    if (filter.owners.length && !filter.owners.includes(info.owner)) return false;
    if (filter.statuses.length && !filter.statuses.some((status) => hasStatus(info, status))) return false;
    if (!filter.words.length) return true;
    const text = [info.id, info.owner, info.title, info.terminal_title, info.description, commandLine(info)]
      .filter(Boolean).join('\n').toLowerCase();
    return filter.words.every((word) => text.includes(word));
  }

  // ---- sorting: each column's value; empty values go last whichever the direction
  const SORT_VALUES = {
    id: (info) => info.id,
    owner: (info) => info.owner,
    title: (info) => info.title || info.description,
    terminal_title: (info) => info.terminal_title,
    command: commandLine,
    status: (info) => STATUS_ORDER[info.status],
    exit: (info) => (info.exit_code ?? (info.exit_signal === null || info.exit_signal === undefined ? null : 1000 + info.exit_signal)),
    age: (info) => -info.created_at, // ascending age: the youngest first
    lines: (info) => info.line_count,
  };
  const DESCENDING_FIRST = new Set(['lines']);

  function compareSessions(a, b) {
    const value = SORT_VALUES[state.sort.key];
    const x = value(a);
    const y = value(b);
    const xEmpty = x === null || x === undefined || x === '';
    const yEmpty = y === null || y === undefined || y === '';
    let order = 0;
    if (xEmpty || yEmpty) order = xEmpty === yEmpty ? 0 : xEmpty ? 1 : -1;
    else {
      order = typeof x === 'string' ? x.localeCompare(y) : x - y;
      if (!state.sort.ascending) order = -order;
    }
    return order || b.created_at - a.created_at || a.id.localeCompare(b.id);
  }

  // ---- one open terminal: a session's xterm.js, its tab and its attachment

  function terminalFont() {
    // One declaration of the stack: --mono in monitor.css (DejaVu Sans Mono for the grid,
    // Noto Sans Mono CJK and Noto Color Emoji for what it lacks).
    return getComputedStyle(document.documentElement).getPropertyValue('--mono').trim() || 'monospace';
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ---- a shell session's commands, each with its exit code (pty.commands)

  function duration(ms) {
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
    return `${Math.floor(ms / 60000)}m ${Math.round((ms % 60000) / 1000)}s`;
  }

  function commandItem(command) {
    const item = element('li', 'command ' + command.state);
    item.dataset.number = String(command.number);
    const code = element('span', 'code');
    let how;
    if (command.state === 'running') {
      code.textContent = '\u2026';
      how = 'running';
    } else if (command.exit_code === null || command.exit_code === undefined) {
      code.textContent = '?';
      how = 'the prompt came back without its exit code';
    } else {
      code.textContent = String(command.exit_code);
      item.classList.add(command.exit_code === 0 ? 'ok' : 'failed');
      how = command.state === 'session_ended' ? `the shell ended: exit ${command.exit_code}` : `exit ${command.exit_code}`;
    }
    code.setAttribute('aria-label', how);
    // A running command's duration would go stale between reloads: say it runs instead.
    const took = command.state === 'running' ? 'running' : duration(command.duration_ms);
    item.append(code, element('span', 'text', command.command), element('span', 'took', took));
    const lines = command.first_line === null ? 'no output' : `output lines ${command.first_line}\u2013${command.last_line}`;
    item.title = [
      `#${command.number}, ${command.source === 'run' ? 'sent by pty.run' : 'typed'}: ${how}`,
      command.cwd ? `in ${command.cwd}` : '',
      `started ${new Date(command.started_at * 1000).toLocaleTimeString()}` + (command.state === 'running' ? '' : `, took ${took}`),
      lines,
    ].filter(Boolean).join('\n');
    return item;
  }

  class Commands {
    constructor(view) {
      this.view = view;
      this.loadedFor = null; // the session's output size and status the list reflects
      this.loading = false;
      this.element = element('aside', 'commands');
      this.element.setAttribute('aria-label', 'Commands and their exit codes');
      this.summary = element('span', 'muted');
      const head = element('div', 'commands-head');
      head.append(element('span', 'label', 'Commands'), this.summary);
      this.list = element('ol', 'commands-list');
      this.empty = element('p', 'muted', 'No command yet.');
      this.element.append(head, this.list, this.empty);
    }

    // Reload when the session's output or status moved since the last load: a command
    // starting or ending writes its marks into the output, and the shell ending ends it.
    async load() {
      const info = this.view.info;
      const key = `${info.byte_count}:${info.status}`;
      const rpc = state.rpc;
      if (this.loading || key === this.loadedFor || !state.commands || !rpc || !state.connected) return;
      this.loading = true;
      try {
        const result = await rpc.call('pty.commands', { id: info.id, owner: info.owner, limit: COMMANDS_LIMIT });
        this.loadedFor = key;
        if (!this.view.disposed) this.render(result.commands);
      } catch (error) {
        if (error.code === -32601) shellSessions(false); // the server went back to an older one
      } finally {
        this.loading = false;
      }
    }

    render(commands) {
      const list = this.list;
      const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
      list.replaceChildren(...commands.map(commandItem));
      if (atEnd) list.scrollTop = list.scrollHeight;
      const failed = commands.filter((c) => c.state !== 'running' && c.exit_code !== null && c.exit_code !== 0).length;
      this.summary.textContent = commands.length ? `${commands.length}${failed ? `, ${failed} failed` : ''}` : '';
      this.empty.hidden = commands.length > 0;
    }
  }

  class View {
    constructor(info) {
      this.id = info.id;
      this.owner = info.owner;
      this.info = info;
      this.nextOffset = null; // next_offset of the last chunk rendered: where a resume starts
      this.attached = false;
      this.driving = false; // the person typed into it (or moved the splitter): it sizes
      this.clipped = false; // watching a session larger than the box: its top-left shows
      this.redrawing = false;
      this.removed = false;
      this.queue = []; // escaped input not sent yet
      this.writing = false;
      this.resizing = false;
      this.sentSize = null;
      this.disposed = false;
      this.used = 0;
      this.results = null; // the search addon's last {resultIndex, resultCount}

      // The tab (always) and the view (its caption shows in the grid only).
      this.tab = element('div', 'tab');
      this.tab.setAttribute('role', 'tab');
      this.tab.tabIndex = 0;
      this.tab.dataset.id = info.id;
      this.tabDot = element('span', 'dot');
      this.tabLabel = element('span', 'label');
      const tabClose = element('button', 'close', '\u00d7');
      tabClose.type = 'button';
      tabClose.title = 'Close this terminal (detach)';
      this.tab.append(this.tabDot, this.tabLabel, tabClose);
      this.tab.addEventListener('click', (event) => {
        if (event.target === tabClose) closeView(this);
        else activate(this, { focus: true });
      });
      this.tab.addEventListener('keydown', (event) => {
        if (event.target !== this.tab) return;
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          activate(this, { focus: true });
        } else if (event.key === 'Delete') closeView(this);
      });

      this.element = element('div', 'view');
      this.element.dataset.id = info.id;
      this.caption = element('div', 'view-head');
      this.captionLabel = element('span', 'label');
      this.captionBadge = element('span', 'badge');
      const captionClose = element('button', 'close link', '\u00d7');
      captionClose.type = 'button';
      captionClose.title = 'Close this terminal (detach)';
      captionClose.addEventListener('click', () => closeView(this));
      this.caption.append(this.captionLabel, this.captionBadge, element('span', 'spacer'), captionClose);
      this.caption.addEventListener('click', (event) => {
        if (event.target !== captionClose) activate(this, { focus: true });
      });
      this.host = element('div', 'term');
      const body = element('div', 'view-body');
      body.append(this.host);
      // A shell session lists its commands with their exit codes beside the terminal.
      this.commands = info.shell ? new Commands(this) : null;
      if (this.commands) {
        body.append(this.commands.element);
        this.commands.element.hidden = !state.commands;
      }
      this.element.append(this.caption, body);
      this.element.addEventListener('focusin', () => activate(this));
      $('tabs').append(this.tab);
      $('terminals').append(this.element);

      this.term = new Terminal({
        allowProposedApi: true, // the unicode API and the search addon's match decorations
        cursorBlink: true,
        scrollback: 10000,
        fontFamily: terminalFont(),
        fontSize: 14,
        // Room under the baseline: at the default height (16 px rows at 14 px) the
        // underscore, drawn below the descenders, was clipped away at 1x pixel density.
        lineHeight: 1.2,
        overviewRulerWidth: 10,
        theme: { background: '#000000', foreground: '#d1d7e0', cursor: '#3fb950' },
      });
      this.fit = new FitAddon.FitAddon();
      this.term.loadAddon(this.fit);
      // Emoji and other wide characters take two cells, as the programs' wcwidth says.
      this.term.loadAddon(new Unicode11Addon.Unicode11Addon());
      this.term.unicode.activeVersion = '11';
      this.search = new SearchAddon.SearchAddon({ highlightLimit: SEARCH_LIMIT });
      this.term.loadAddon(this.search);
      this.search.onDidChangeResults((results) => {
        this.results = results;
        if (state.active === this) showSearchCount();
      });
      this.term.attachCustomKeyEventHandler((event) => {
        if (event.type === 'keydown' && event.ctrlKey && event.shiftKey && event.code === 'KeyF') {
          event.preventDefault();
          focusSearch();
          return false;
        }
        return true;
      });
      this.term.open(this.host);
      this.term.onData((data) => this.input(escapeText(data)));
      this.term.onKey(() => this.drive()); // keys only: not xterm.js's answers to queries
      this.term.onBinary((data) => this.input(escapeBinary(data)));
      this.term.onResize(() => this.resized());
      this.term.options.disableStdin = !drives(info);
      let frame = 0;
      this.observer = new ResizeObserver(() => {
        cancelAnimationFrame(frame);
        frame = requestAnimationFrame(() => this.fitNow());
      });
      this.observer.observe(this.host);
      this.label();
    }

    dispose() {
      this.disposed = true;
      this.observer.disconnect();
      this.term.dispose();
      this.tab.remove();
      this.element.remove();
    }

    // The tab's and the caption's text: what the session is called, then its id.
    label() {
      const info = this.info;
      const name = info.title || info.terminal_title || info.command;
      const text = `${name} \u00b7 ${info.id}`;
      setText(this.tabLabel, text);
      this.tab.title = [info.id, info.title, info.terminal_title, info.description].filter(Boolean).join('\n');
      setText(this.captionLabel, info.terminal_title ? `${info.id} \u00b7 ${info.terminal_title}` : text);
      badge(this.captionBadge, info);
      if (this.removed) this.captionBadge.textContent = 'removed';
      this.tabDot.className = 'dot ' + info.status + (failed(info) ? ' failed' : '');
    }

    visible() {
      return this.host.clientWidth > 0 && this.host.clientHeight > 0;
    }

    // Whether this view sets the session's size: the focused view of the tabs layout, once
    // the person typed into it or moved the splitter, on a session this page drives. Every
    // other view shows the session at the session's size, clipped by its box.
    sizes() {
      return this.driving && this.attached && state.layout !== 'grid' && state.active === this && drives(this.info);
    }

    // The person means this view: from now on it fits its box and the session follows.
    drive() {
      if (this.driving || state.layout === 'grid' || state.active !== this || !drives(this.info)) return;
      this.driving = true;
      this.fitNow();
      this.sendSize();
    }

    fitNow() {
      if (this.disposed) return;
      if (!this.sizes()) {
        // Watching: the session's size, whatever the box (a larger session is clipped).
        const { rows, cols } = this.info;
        if (rows > 0 && cols > 0 && (this.term.rows !== rows || this.term.cols !== cols)) this.term.resize(cols, rows);
        // A session larger than the box shows its top-left: say so (toolbar and tooltip).
        const fits = this.visible() ? this.fit.proposeDimensions() : undefined;
        this.clipped = Boolean(fits && (fits.rows < this.term.rows || fits.cols < this.term.cols));
        this.host.title = this.clipped ? `The top-left of the session's ${this.term.cols}\u00d7${this.term.rows} screen: type here to resize it to this box` : '';
        this.element.classList.toggle('clipped', this.clipped);
        if (state.active === this) showSize();
        return;
      }
      this.clipped = false;
      this.host.title = '';
      this.element.classList.remove('clipped');
      if (!this.visible()) return;
      try {
        this.fit.fit();
      } catch (error) {
        return; // not laid out yet
      }
      if (state.active === this) showSize();
    }

    async attach() {
      const rpc = state.rpc;
      if (!rpc || !state.connected || this.removed || this.disposed) return;
      const driver = drives(this.info);
      // The session's state drawn, then live output from exactly where the drawing stands.
      const params = { id: this.id, owner: this.owner, driver, redraw: true };
      let first;
      try {
        first = await rpc.call('pty.attach', params);
      } catch (error) {
        if (error.kind === 'session_not_found') this.gone();
        else if (rpc === state.rpc && state.active === this) note(`attach failed: ${error.message}`);
        return;
      }
      if (this.disposed || state.rpc !== rpc) {
        rpc.call('pty.detach', { id: this.id, owner: this.owner }).catch(() => {});
        return;
      }
      this.attached = true;
      this.accept(first);
      if (this.sizes()) {
        this.sentSize = null;
        this.sendSize();
      }
    }

    // The session changed size while this view only watched: draw it afresh at its new
    // size (output already shown at the old width would stay garbled).
    async redraw() {
      const rpc = state.rpc;
      if (this.redrawing || !this.attached || !rpc) return;
      this.redrawing = true;
      try {
        await rpc.call('pty.detach', { id: this.id, owner: this.owner });
        this.attached = false;
        await this.attach();
      } catch (error) {
        // It ended, or the connection dropped (the reconnect attaches afresh).
      } finally {
        this.redrawing = false;
      }
    }

    detach() {
      if (this.attached && state.connected) {
        state.rpc.call('pty.detach', { id: this.id, owner: this.owner }).catch(() => {});
      }
      this.attached = false;
    }

    // One chunk, from the attach response or a pty.output notification.
    accept(chunk) {
      let data = base64Bytes(chunk.data);
      if (chunk.drawn) {
        // The state as of next_offset, drawn for rows x cols: on a clean terminal.
        this.term.reset();
        if (!this.sizes() && chunk.rows > 0 && chunk.cols > 0) this.term.resize(chunk.cols, chunk.rows);
        this.nextOffset = chunk.next_offset;
        this.term.write(data);
        return;
      }
      if (chunk.gap && this.nextOffset !== null) {
        this.term.write('\r\n\x1b[33m[trio-pty: output was dropped here: this view fell behind the buffer]\x1b[0m\r\n');
      } else if (this.nextOffset !== null) {
        if (chunk.next_offset <= this.nextOffset) return; // seen already
        if (chunk.offset < this.nextOffset) data = data.subarray(this.nextOffset - chunk.offset);
      }
      this.nextOffset = chunk.next_offset;
      if (data.length) this.term.write(data);
    }

    exited(event) {
      this.update(Object.assign({}, this.info, {
        status: event.exit_signal !== null && event.exit_code === null ? 'killed' : 'exited',
        exit_code: event.exit_code,
        exit_signal: event.exit_signal,
        timed_out: event.timed_out,
      }));
    }

    update(info) {
      const wasLive = isLive(this.info);
      this.info = info;
      this.term.options.disableStdin = !drives(info);
      if (wasLive && !isLive(info)) this.queue = [];
      this.label();
      if (state.active === this) toolbar();
      if (this.commands) this.commands.load();
      if (this.attached && !this.sizes() && isLive(info) && (info.rows !== this.term.rows || info.cols !== this.term.cols)) {
        this.redraw(); // resized by someone else: drawn afresh at its size
      }
    }

    gone() {
      this.removed = true;
      this.attached = false;
      this.term.options.disableStdin = true;
      this.label();
      if (state.active === this) toolbar();
    }

    input(escaped) {
      if (!this.attached || !drives(this.info) || !state.connected) return;
      this.queue.push(escaped);
      this.flush();
    }

    // Writes go one at a time (requests on a connection run concurrently on the server, so
    // only this keeps keystrokes in order), batching whatever was typed meanwhile.
    async flush() {
      if (this.writing) return;
      this.writing = true;
      try {
        while (this.queue.length && state.connected && drives(this.info) && !this.disposed) {
          let data = '';
          while (this.queue.length && data.length + this.queue[0].length <= WRITE_BATCH_CHARS) {
            data += this.queue.shift();
          }
          if (!data) data = this.queue.shift();
          await state.rpc.call('pty.write', { id: this.id, owner: this.owner, data, escapes: true });
        }
      } catch (error) {
        this.queue = [];
        if (state.active === this) note(`input not sent: ${error.message}`);
      } finally {
        this.writing = false;
      }
    }

    resized() {
      if (state.active === this) showSize();
      if (this.sizes()) this.sendSize();
    }

    // Last resizer wins on the server; here, only one resize is in flight and the last size
    // asked for is the one sent after it.
    async sendSize() {
      if (this.resizing) return;
      this.resizing = true;
      try {
        while (state.connected && this.sizes() && !this.disposed) {
          const size = `${this.term.rows}x${this.term.cols}`;
          if (size === this.sentSize) break;
          await state.rpc.call('pty.resize', { id: this.id, owner: this.owner, rows: this.term.rows, cols: this.term.cols });
          this.sentSize = size;
        }
      } catch (error) {
        if (error.kind !== 'not_running' && state.active === this) note(`resize failed: ${error.message}`);
      } finally {
        this.resizing = false;
      }
    }

    // Scrollback search (the search addon): the next or previous match of `text`, selected
    // and scrolled to, every match highlighted.
    find(text, { backwards = false, incremental = false, caseSensitive = false } = {}) {
      if (!text) {
        this.search.clearDecorations();
        this.term.clearSelection();
        this.results = null;
        return false;
      }
      const options = { caseSensitive, incremental, decorations: SEARCH_DECORATIONS };
      return backwards ? this.search.findPrevious(text, options) : this.search.findNext(text, options);
    }
  }

  // ---- open terminals: tabs or a grid

  function openView(info, { focus = true } = {}) {
    let view = state.views.get(info.id);
    if (!view) {
      if (state.views.size >= MAX_VIEWS) {
        const oldest = [...state.views.values()].reduce((a, b) => (b.used < a.used ? b : a));
        closeView(oldest);
      }
      view = new View(info);
      state.views.set(info.id, view);
      arrange();
      view.attach();
      if (view.commands) view.commands.load();
    }
    activate(view, { focus });
    return view;
  }

  function closeView(view) {
    view.detach();
    view.dispose();
    state.views.delete(view.id);
    if (state.active === view) {
      state.active = null;
      const next = [...state.views.values()].reduce((a, b) => (!a || b.used > a.used ? b : a), null);
      if (next) activate(next);
    }
    arrange();
    toolbar();
    renderList();
  }

  function activate(view, { focus = false } = {}) {
    if (state.active !== view) {
      const previous = state.active;
      state.active = view;
      view.used = ++state.uses;
      if (previous) {
        previous.driving = false; // only the focused view sizes its session
        previous.element.classList.remove('active');
        previous.tab.setAttribute('aria-selected', 'false');
      }
      view.element.classList.add('active');
      view.tab.setAttribute('aria-selected', 'true');
      view.tab.scrollIntoView({ block: 'nearest', inline: 'nearest' });
      requestAnimationFrame(() => view.fitNow()); // a tab that was hidden has a new box
      toolbar();
      showSearchCount();
      renderList();
    }
    if (focus) view.term.focus();
  }

  // Tabs show the active view; the grid shows them all, in about as many columns as rows.
  function arrange() {
    if (state.layout === 'grid') for (const view of state.views.values()) view.driving = false;
    const box = $('terminals');
    box.className = state.layout;
    const count = state.views.size;
    box.style.setProperty('--cols', String(Math.max(1, Math.ceil(Math.sqrt(count)))));
    $('no-terminal').hidden = count > 0;
    $('layout').setAttribute('aria-pressed', String(state.layout === 'grid'));
    $('layout').textContent = state.layout === 'grid' ? 'Tabs' : 'Grid';
    $('layout').title = state.layout === 'grid' ? 'Show one terminal at a time' : 'Show every open terminal at once';
    requestAnimationFrame(() => {
      for (const view of state.views.values()) view.fitNow();
    });
  }

  // ---- the session list: newest first by default, sortable, filtered; rows kept by id so
  // that a refresh does not rebuild them (focus and hover survive it)

  const rows = new Map(); // session id -> {row, cells, badge}

  function rowFor(info) {
    let entry = rows.get(info.id);
    if (!entry) {
      const row = document.createElement('tr');
      row.dataset.id = info.id;
      row.tabIndex = 0;
      const cells = {};
      // In the header's order: what matters most first, for narrow windows.
      for (const name of ['id', 'status', 'exit', 'owner', 'title', 'term', 'cmd', 'age', 'lines']) {
        cells[name] = element('td', name);
        row.append(cells[name]);
      }
      cells.lines.classList.add('num');
      const status = element('span', 'badge');
      cells.status.append(status);
      row.addEventListener('mousedown', (event) => event.preventDefault()); // focus goes to its terminal
      row.addEventListener('click', () => openById(info.id));
      row.addEventListener('keydown', (event) => {
        if (event.key === 'Enter') openById(info.id);
      });
      entry = { row, cells, status };
      rows.set(info.id, entry);
    }
    const { row, cells, status } = entry;
    const title = info.title || info.description;
    row.title = info.description;
    setText(cells.id, info.id);
    setText(cells.owner, info.owner);
    setText(cells.title, title);
    cells.title.classList.toggle('muted', !info.title);
    setText(cells.term, info.terminal_title || '');
    cells.term.title = info.terminal_title || '';
    setText(cells.cmd, commandLine(info));
    badge(status, info);
    setText(cells.exit, exitText(info));
    setText(cells.age, age(info.created_at));
    setText(cells.lines, String(info.line_count));
    row.classList.toggle('open', state.views.has(info.id));
    row.classList.toggle('selected', !!state.active && state.active.id === info.id);
    return row;
  }

  function shownSessions() {
    return state.sessions.filter((info) => matchesFilter(info, state.filter)).sort(compareSessions);
  }

  function renderList() {
    const shown = shownSessions();
    const wanted = shown.map(rowFor);
    const listed = new Set(state.sessions.map((info) => info.id));
    for (const id of rows.keys()) if (!listed.has(id)) rows.delete(id);
    const body = $('sessions').tBodies[0];
    const current = body.children;
    if (current.length !== wanted.length || wanted.some((row, i) => current[i] !== row)) {
      body.replaceChildren(...wanted);
    }
    for (const th of $('sessions').tHead.rows[0].cells) {
      if (th.dataset.key === state.sort.key) th.setAttribute('aria-sort', state.sort.ascending ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
    const total = state.sessions.length;
    const live = state.sessions.filter(isLive).length;
    let count = total ? `${total} (${live} running)` : '';
    if (shown.length !== total) count = `${shown.length} of ${total} shown (${live} running)`;
    $('count').textContent = count;
    $('empty').hidden = shown.length > 0;
    $('empty').textContent = total ? 'No session matches the filter.' : 'No sessions.';
  }

  function sortBy(key) {
    if (state.sort.key === key) state.sort.ascending = !state.sort.ascending;
    else state.sort = { key, ascending: !DESCENDING_FIRST.has(key) };
    renderList();
  }

  function openById(id) {
    const info = state.sessions.find((s) => s.id === id);
    if (info) openView(info);
  }

  async function refresh() {
    const rpc = state.rpc;
    if (!rpc || !state.connected || state.listing) return;
    state.listing = true;
    let everyone;
    try {
      everyone = (await rpc.call('pty.list', { all_owners: true })).sessions;
    } catch (error) {
      return;
    } finally {
      state.listing = false;
    }
    state.sessions = ofListedOwners(everyone);
    // Open views follow the server's list, not ?owner= (the spawn form may start a session
    // for an owner this page does not list).
    const byId = new Map(everyone.map((info) => [info.id, info]));
    for (const view of state.views.values()) {
      const info = byId.get(view.id);
      if (info) view.update(info);
      else if (!view.removed) view.gone();
    }
    renderList();
  }

  function ofListedOwners(sessions) {
    if (!ownerFilter.length) return sessions;
    return sessions.filter((info) => ownerFilter.includes(info.owner));
  }

  // ---- the toolbar of the active view

  function showSize() {
    const view = state.active;
    $('term-size').textContent = view ? `${view.term.cols}\u00d7${view.term.rows}${view.clipped ? ' (clipped)' : ''}` : '';
  }

  function toolbar() {
    const view = state.active;
    const status = $('term-status');
    const search = $('search').elements;
    for (const control of [search.query, search.case, $('search-prev'), $('search-next')]) {
      control.disabled = !view;
    }
    if (!view) {
      $('term-title').textContent = 'No session selected';
      status.hidden = true;
      $('kill').disabled = $('cleanup').disabled = true;
      $('record').disabled = true;
      showSize();
      note('');
      return;
    }
    const info = view.info;
    const title = info.title || info.terminal_title;
    $('term-title').textContent = title ? `${info.id} \u00b7 ${title}` : info.id;
    $('term-title').title = [info.title, info.terminal_title].filter(Boolean).join('\n');
    status.hidden = false;
    badge(status, info);
    if (view.removed) {
      status.textContent = 'removed';
      note('this session is gone from the server; its last output stays here');
    } else if (!isLive(info)) {
      note(`ended: exit ${exitText(info)}; the output stays readable`);
    } else if (!state.connected) {
      note('disconnected: input is paused');
    } else if (state.readOnly) {
      note(`owner ${info.owner}; read-only token: watching`);
    } else {
      note(`owner ${info.owner}`);
    }
    $('kill').disabled = view.removed || !drives(info) || !state.connected;
    $('cleanup').disabled = view.removed || state.readOnly || !state.connected;
    $('record').disabled = view.removed || !state.connected;
    showSize();
  }

  // ---- scrollback search in the active view

  function focusSearch() {
    const input = $('search').elements.query;
    input.focus();
    input.select();
  }

  function runSearch({ backwards = false, incremental = false } = {}) {
    const view = state.active;
    if (!view) return;
    const form = $('search').elements;
    const found = view.find(form.query.value, { backwards, incremental, caseSensitive: form.case.checked });
    if (!form.query.value || !found) showSearchCount();
  }

  function showSearchCount() {
    const view = state.active;
    const text = view ? $('search').elements.query.value : '';
    let shown = '';
    if (text && view && view.results) {
      const { resultIndex, resultCount } = view.results;
      if (!resultCount) shown = 'no match';
      else {
        const total = resultCount >= SEARCH_LIMIT ? `${SEARCH_LIMIT}+` : String(resultCount);
        shown = resultIndex >= 0 ? `${resultIndex + 1}/${total}` : total;
      }
    } else if (text && view) {
      shown = 'no match';
    }
    $('search-count').textContent = shown;
  }

  // ---- the splitter between the list and the terminals (pointer or keyboard)
  //
  // The list's height is kept as a share of the room below the page header, so it scales
  // with the window; both sides keep a minimum.

  const split = {
    share: SPLIT_DEFAULT,
    room() {
      return $('split').clientHeight - $('splitter').offsetHeight;
    },
    apply() {
      const total = split.room();
      if (total <= 0) return;
      const low = Math.min(SPLIT_MIN_LIST_PX, total / 2);
      const high = Math.max(low, total - SPLIT_MIN_TERMINAL_PX);
      const height = Math.round(Math.min(high, Math.max(low, split.share * total)));
      split.share = height / total;
      $('sessions-pane').style.height = `${height}px`;
      $('splitter').setAttribute('aria-valuenow', String(Math.round(split.share * 100)));
    },
    // Grow the list (as far as the terminals' minimum allows) to give its scroll box `px`.
    ensureListRoom(px) {
      const missing = px - $('list-scroll').clientHeight;
      if (missing <= 0) return;
      split.share = ($('sessions-pane').offsetHeight + missing) / split.room();
      split.apply();
    },
    setup() {
      const bar = $('splitter');
      const moveTo = (clientY) => {
        const top = $('split').getBoundingClientRect().top;
        split.share = (clientY - top - bar.offsetHeight / 2) / split.room();
        split.apply();
      };
      // Moving it resizes the focused terminal on purpose: that view sizes its session.
      const meant = () => state.active && state.active.drive();
      bar.addEventListener('pointerdown', (event) => {
        if (event.button !== 0) return;
        meant();
        event.preventDefault();
        bar.setPointerCapture(event.pointerId);
        bar.classList.add('dragging');
      });
      bar.addEventListener('pointermove', (event) => {
        if (bar.hasPointerCapture(event.pointerId)) moveTo(event.clientY);
      });
      const release = (event) => {
        if (bar.hasPointerCapture(event.pointerId)) bar.releasePointerCapture(event.pointerId);
        bar.classList.remove('dragging');
      };
      bar.addEventListener('pointerup', release);
      bar.addEventListener('pointercancel', release);
      bar.addEventListener('dblclick', () => {
        split.share = SPLIT_DEFAULT;
        split.apply();
      });
      bar.addEventListener('keydown', (event) => {
        const steps = { ArrowUp: -SPLIT_STEP, ArrowDown: SPLIT_STEP, PageUp: -4 * SPLIT_STEP, PageDown: 4 * SPLIT_STEP };
        if (event.key in steps) split.share += steps[event.key];
        else if (event.key === 'Home') split.share = 0;
        else if (event.key === 'End') split.share = 1;
        else return;
        meant();
        event.preventDefault();
        split.apply();
      });
      new ResizeObserver(() => split.apply()).observe($('split'));
      split.apply();
    },
  };

  async function kill(cleanup) {
    const view = state.active;
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

  // The selected session as an asciicast v3 file (pty.record), saved through a Blob link:
  // what the server keeps of it, so a session gone from the server has none.
  async function downloadRecording() {
    const view = state.active;
    if (!view || !state.connected) return;
    try {
      const recording = await state.rpc.call('pty.record', { id: view.id, owner: view.owner });
      const url = URL.createObjectURL(new Blob([recording.cast], { type: 'application/x-asciicast' }));
      const link = document.createElement('a');
      link.href = url;
      link.download = `${view.id}.cast`;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (error) {
      note(`recording failed: ${error.message}`);
    }
  }

  function showSpawnForm(open) {
    const form = $('spawn-form');
    form.hidden = !open;
    $('spawn-toggle').setAttribute('aria-expanded', String(open));
    if (open) {
      // Room for the whole form, the table's header and two rows, when the window has it.
      const head = $('sessions').tHead.offsetHeight;
      split.ensureListRoom(form.offsetHeight + 20 + head * 3);
      $('list-scroll').scrollTop = 0;
      form.elements.command.focus();
    }
  }

  // What the token may do, once per connection: a read-only one gets no spawn form, no
  // kill, and views that only watch. Without an answer, as before: drive.
  async function readScope(rpc) {
    let readOnly = false;
    try {
      const info = await rpc.call('server.info', {});
      readOnly = Boolean(info.scope && info.scope.read_only);
    } catch (error) {
      // an older server, or the connection dropped (the next one asks again)
    }
    state.readOnly = readOnly;
    $('spawn-toggle').hidden = readOnly;
    if (readOnly) showSpawnForm(false);
    for (const view of state.views.values()) view.term.options.disableStdin = !drives(view.info);
  }

  // Whether the server has shell sessions over RPC: ask once per connection (an unknown
  // method is -32601, an unknown session any other error). An older server has none: no
  // shell choice in the form, no command lists.
  async function probeShellSessions(rpc) {
    try {
      await rpc.call('pty.commands', { id: 'pty_00000000' });
      shellSessions(true);
    } catch (error) {
      if (error instanceof RpcError) shellSessions(error.code !== -32601);
    }
  }

  function shellSessions(available) {
    state.commands = available;
    const form = $('spawn-form').elements;
    form.shell.closest('label').hidden = !available;
    if (!available && form.shell.checked) {
      form.shell.checked = false;
      shellChosen();
    }
    for (const view of state.views.values()) {
      if (!view.commands) continue;
      view.commands.element.hidden = !available;
      if (available) view.commands.load();
    }
  }

  // A shell session (pty.spawn_shell) takes a shell's name, or none, and no arguments.
  function shellChosen() {
    const form = $('spawn-form').elements;
    const shell = form.shell.checked;
    form.command.required = !shell;
    form.command.placeholder = shell ? 'bash or zsh (default: $SHELL)' : 'bash';
    form.args.disabled = shell;
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
    let args = [];
    try {
      if (!form.elements.shell.checked) args = splitArgs(form.elements.args.value);
    } catch (problem) {
      error.textContent = problem.message;
      return;
    }
    const size = state.active ? { rows: state.active.term.rows, cols: state.active.term.cols } : {};
    const shell = form.elements.shell.checked;
    const params = Object.assign({
      description: form.elements.description.value,
      owner: form.elements.owner.value.trim() || ownerFilter[0] || 'default',
    }, size);
    if (shell) params.shell = form.elements.command.value.trim() || null; // null: $SHELL or bash
    else Object.assign(params, { command: form.elements.command.value.trim(), args });
    try {
      const info = await state.rpc.call(shell ? 'pty.spawn_shell' : 'pty.spawn', params);
      form.elements.command.value = form.elements.args.value = form.elements.description.value = '';
      showSpawnForm(false);
      await refresh();
      openView(info);
    } catch (problem) {
      error.textContent = problem.kind ? `${problem.message} [${problem.kind}]` : problem.message;
    }
  }

  // ---- the connection

  const handlers = {
    notification(method, params) {
      const view = state.views.get(params.id);
      if (method === 'pty.output') {
        if (view && view.attached) view.accept(params);
      } else if (method === 'pty.exited') {
        if (view) view.exited(params);
        refresh();
      }
    },
    closed(rpc) {
      if (state.rpc !== rpc) return;
      state.rpc = null;
      state.connected = false;
      for (const view of state.views.values()) view.attached = false;
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
    await readScope(rpc);
    await probeShellSessions(rpc);
    await refresh();
    toolbar();
    for (const view of state.views.values()) if (!view.removed) view.attach();
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
    $('record').addEventListener('click', downloadRecording);
    $('spawn-toggle').addEventListener('click', () => showSpawnForm($('spawn-form').hidden));
    $('spawn-cancel').addEventListener('click', () => showSpawnForm(false));
    $('spawn-form').addEventListener('submit', spawn);
    $('spawn-form').elements.shell.addEventListener('change', shellChosen);
    $('filter').addEventListener('input', (event) => {
      state.filter = parseFilter(event.target.value);
      renderList();
    });
    for (const th of $('sessions').tHead.rows[0].cells) {
      th.querySelector('button').addEventListener('click', () => sortBy(th.dataset.key));
    }
    $('layout').addEventListener('click', () => {
      state.layout = state.layout === 'grid' ? 'tabs' : 'grid';
      arrange();
    });
    const search = $('search');
    search.addEventListener('submit', (event) => {
      event.preventDefault();
      runSearch();
    });
    search.elements.query.addEventListener('input', () => runSearch({ incremental: true }));
    search.elements.query.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && event.shiftKey) {
        event.preventDefault();
        runSearch({ backwards: true });
      } else if (event.key === 'Escape' && state.active) {
        event.target.value = '';
        runSearch();
        state.active.term.focus();
      }
    });
    search.elements.case.addEventListener('change', () => runSearch({ incremental: true }));
    $('search-prev').addEventListener('click', () => runSearch({ backwards: true }));
    $('auth-form').addEventListener('submit', (event) => {
      event.preventDefault();
      token = event.target.elements.token.value.trim();
      event.target.elements.token.value = '';
      connect();
    });
    split.setup();
    shellSessions(false); // until the server says it has them
    setInterval(() => {
      refresh();
    }, LIST_INTERVAL_MS);
    arrange();
    renderList();
    toolbar();
    connect();
  }

  function bufferLines(view) {
    const buffer = view.term.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
    while (lines.length && !lines[lines.length - 1]) lines.pop();
    return lines;
  }

  // For tests and for poking at it from the console; nothing here reveals the token.
  window.trioPtyMonitor = Object.freeze({
    status() {
      const view = state.active;
      return {
        connected: state.connected,
        reconnects: state.reconnects,
        sessions: shownSessions().map((info) => info.id), // as the list shows them
        selected: view ? view.id : null,
        open: [...state.views.keys()],
        layout: state.layout,
        readOnly: state.readOnly,
        nextOffset: view ? view.nextOffset : null,
        rows: view ? view.term.rows : null,
        cols: view ? view.term.cols : null,
        violations: state.violations.slice(),
      };
    },
    // Every line of a view's terminal (the active one by default), scrollback included,
    // right-trimmed.
    lines(id) {
      const view = id ? state.views.get(id) : state.active;
      return view ? bufferLines(view) : [];
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

  const missing = ['Terminal', 'FitAddon', 'SearchAddon', 'Unicode11Addon'].filter((name) => typeof window[name] === 'undefined');
  if (missing.length) {
    setConnection('offline', 'xterm.js did not load');
    $('term-title').textContent = `xterm.js did not load (${missing.join(', ')}): no local copy, and the CDN is unreachable or was refused`;
    return;
  }
  routeScriptStylesThroughCssom();
  start();
})();
