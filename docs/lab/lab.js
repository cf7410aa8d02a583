// The lab page (docs/lab.md): controls, three SVG charts and one generated sentence, drawn from the data
// script that `flashsim lab` writes (data.js, window.FLASHSIM_LAB). Plain JavaScript, no library, nothing
// fetched: the page works from the built site opened as files and from `mkdocs serve`.
(function () {
  "use strict";

  var ENV_NAMES = { bandit: "PromptBandit", bandit_hard: "PromptBandit (hard)", gridworld: "ToolGridworld",
                    chain: "ReasoningChain" };
  var ALGORITHM_NAMES = { flash_reinforce: "FlashREINFORCE", grpo: "GRPO", token_gate: "token-local gate",
                          no_gate: "no gate", ppo_clip: "PPO clip", tis: "truncated IS", rloo: "RLOO",
                          dr_grpo: "Dr. GRPO" };
  var COLORS = { a: "#3949ab", b: "#e65100" };
  var SVG = "http://www.w3.org/2000/svg";

  function name(table, key) { return table[key] || key; }

  function Lab(root, data) {
    this.root = root;
    this.data = data;
    this.axes = data.axes;
    this.state = {
      env: this.axes.env[0],
      a: this.axes.algorithm[0],
      b: this.axes.algorithm.indexOf("grpo") >= 0 ? "grpo" : this.axes.algorithm[1],
      lagIndex: 0,
      delta: this.axes.delta[0],
      groupSize: this.axes.group_size[this.axes.group_size.length - 1],
    };
    this.build();
    this.render(null);
  }

  // ------------------------------------------------------------------ data lookup

  Lab.prototype.gated = function (algorithm) { return this.axes.gated.indexOf(algorithm) >= 0; };

  // The series a control state shows for one algorithm: δ = none of a gated loss is the no-gate row.
  Lab.prototype.resolve = function (state, algorithm) {
    var shown = algorithm, delta = "none";
    if (this.gated(algorithm)) {
      if (state.delta === "none") { shown = "no_gate"; } else { delta = state.delta; }
    }
    var lag = this.axes.lag[state.lagIndex];
    var key = [state.env, shown, delta, lag, state.groupSize].join("|");
    return { key: key, series: this.data.series[key] || null, algorithm: algorithm, shown: shown,
             delta: delta, lag: lag };
  };

  Lab.prototype.label = function (resolved) {
    var text = name(ALGORITHM_NAMES, resolved.algorithm);
    if (this.gated(resolved.algorithm)) { text += resolved.delta === "none" ? " (δ = none: no gate)" : " (δ = " + resolved.delta + ")"; }
    return text;
  };

  Lab.prototype.design = function (groupSize) {
    var budget = this.data.config.budget;
    return (budget / groupSize) + " prompts × " + groupSize;
  };

  // ------------------------------------------------------------------ controls

  function element(tag, attributes, text) {
    var node = document.createElement(tag);
    Object.keys(attributes || {}).forEach(function (key) { node.setAttribute(key, attributes[key]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  Lab.prototype.select = function (id, labelText, options, value, onChange) {
    var wrap = element("label", { class: "lab-control", for: id });
    wrap.appendChild(element("span", { class: "lab-control-name" }, labelText));
    var select = element("select", { id: id });
    options.forEach(function (option) {
      var node = element("option", { value: String(option[0]) }, option[1]);
      if (String(option[0]) === String(value)) { node.selected = true; }
      select.appendChild(node);
    });
    select.addEventListener("change", function () { onChange(select.value); });
    wrap.appendChild(select);
    return wrap;
  };

  Lab.prototype.build = function () {
    var self = this, axes = this.axes, controls = element("div", { class: "lab-controls" });
    var algorithms = axes.algorithm.map(function (a) { return [a, name(ALGORITHM_NAMES, a)]; });
    function change(field, convert) {
      return function (value) {
        var before = Object.assign({}, self.state);
        self.state[field] = convert ? convert(value) : value;
        self.render(before);
      };
    }
    controls.appendChild(this.select("lab-env", "Environment", axes.env.map(function (e) {
      return [e, name(ENV_NAMES, e)]; }), this.state.env, change("env")));
    controls.appendChild(this.select("lab-a", "Algorithm", algorithms, this.state.a, change("a")));
    controls.appendChild(this.select("lab-b", "Compare with", algorithms, this.state.b, change("b")));
    controls.appendChild(this.select("lab-delta", "Gate threshold δ", axes.delta.map(function (d) {
      return [d, d === "none" ? "none (no gate)" : d]; }), this.state.delta, change("delta")));
    controls.appendChild(this.select("lab-design", "Batch design (B = " + this.data.config.budget + ")",
      axes.group_size.map(function (g) { return [g, self.design(g)]; }), this.state.groupSize,
      change("groupSize", Number)));

    var lagWrap = element("label", { class: "lab-control lab-lag", for: "lab-lag" });
    var lagName = element("span", { class: "lab-control-name" });
    lagName.appendChild(document.createTextNode("Policy lag "));
    this.lagValue = element("output", { id: "lab-lag-value", for: "lab-lag" });
    lagName.appendChild(this.lagValue);
    lagWrap.appendChild(lagName);
    var slider = element("input", { id: "lab-lag", type: "range", min: "0", max: String(axes.lag.length - 1),
                                    step: "1", value: "0", "aria-label": "policy lag L (learner updates)" });
    slider.addEventListener("input", function () { change("lagIndex", Number)(slider.value); });
    lagWrap.appendChild(slider);
    var ticks = element("span", { class: "lab-ticks", "aria-hidden": "true" });
    axes.lag.forEach(function (lag) { ticks.appendChild(element("span", {}, String(lag))); });
    lagWrap.appendChild(ticks);
    controls.appendChild(lagWrap);

    this.root.textContent = "";
    this.root.appendChild(controls);
    this.sentence = element("p", { id: "lab-sentence", class: "lab-sentence", "aria-live": "polite" });
    this.root.appendChild(this.sentence);
    this.legend = element("div", { class: "lab-legend" });
    this.root.appendChild(this.legend);
    this.charts = {};
    [["success", "Exact success against rollouts spent"],
     ["acceptance", "Gate acceptance over training"],
     ["quality", "Update quality at a fixed policy: cosine of ĝ to ∇J against lag"]].forEach(function (pair) {
      var figure = element("figure", { class: "lab-figure", id: "lab-" + pair[0] });
      figure.appendChild(element("figcaption", {}, pair[1]));
      var holder = element("div", { class: "lab-chart" });
      figure.appendChild(holder);
      self.root.appendChild(figure);
      self.charts[pair[0]] = holder;
    });
    this.table = element("div", { class: "lab-table" });
    this.root.appendChild(this.table);
    var width = this.root.clientWidth;
    window.addEventListener("resize", function () {
      if (self.root.clientWidth !== width) { width = self.root.clientWidth; self.render(undefined); }
    });
  };

  // ------------------------------------------------------------------ charts

  function svgNode(tag, attributes, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attributes).forEach(function (key) { node.setAttribute(key, attributes[key]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  // About `count` round tick values (1, 2, 2.5 or 5 times a power of ten apart) from low to high.
  function niceTicks(low, high, count) {
    var raw = (high - low) / count, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (f) { return f * power; }).filter(function (v) { return v >= raw; })[0];
    var ticks = [];
    for (var value = Math.ceil(low / step - 1e-9) * step; value <= high + step * 1e-9; value += step) {
      ticks.push(Math.abs(value) < step * 1e-9 ? 0 : value);
    }
    return ticks;
  }

  function tickText(value) {
    if (Math.abs(value) >= 1000) { return (value / 1000) + "k"; }
    return String(Math.round(value * 1000) / 1000);
  }

  // lines: [{id, color, dashed, x: [...], y: [...], low, high, marker}] (null y values are gaps)
  function chart(holder, spec) {
    var width = Math.max(280, holder.clientWidth || 600), narrow = width < 500;
    var height = narrow ? 220 : 260, margin = { left: 52, right: 14, top: 12, bottom: 44 };
    var plotW = width - margin.left - margin.right, plotH = height - margin.top - margin.bottom;
    var svg = svgNode("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height,
                               role: "img", "aria-label": spec.title });
    var xs = [], ys = [spec.yMin, spec.yMax];
    spec.lines.forEach(function (line) {
      xs = xs.concat(line.x);
      ys = ys.concat(line.y, line.low || [], line.high || []).filter(function (v) { return v !== null; });
    });
    var xMin = spec.xMin !== undefined ? spec.xMin : Math.min.apply(null, xs.length ? xs : [0]);
    var xMax = Math.max.apply(null, xs.length ? xs : [1]);
    if (xMax === xMin) { xMax = xMin + 1; }
    var yMin = Math.min.apply(null, ys), yMax = Math.max.apply(null, ys);
    function X(v) { return margin.left + (v - xMin) / (xMax - xMin) * plotW; }
    function Y(v) { return margin.top + (1 - (v - yMin) / (yMax - yMin)) * plotH; }

    var grid = svgNode("g", { class: "lab-grid" });
    niceTicks(yMin, yMax, narrow ? 4 : 5).forEach(function (value) {
      grid.appendChild(svgNode("line", { x1: margin.left, x2: margin.left + plotW, y1: Y(value), y2: Y(value) }));
      grid.appendChild(svgNode("text", { x: margin.left - 6, y: Y(value) + 4, "text-anchor": "end" }, tickText(value)));
    });
    (spec.xTicks || niceTicks(xMin, xMax, narrow ? 4 : 7)).forEach(function (value) {
      grid.appendChild(svgNode("line", { x1: X(value), x2: X(value), y1: margin.top + plotH, y2: margin.top + plotH + 4 }));
      grid.appendChild(svgNode("text", { x: X(value), y: margin.top + plotH + 17, "text-anchor": "middle" },
                               tickText(value)));
    });
    svg.appendChild(grid);
    svg.appendChild(svgNode("rect", { class: "lab-frame", x: margin.left, y: margin.top, width: plotW, height: plotH }));
    svg.appendChild(svgNode("text", { class: "lab-axis", x: margin.left + plotW / 2, y: height - 6,
                                      "text-anchor": "middle" }, spec.xLabel));
    svg.appendChild(svgNode("text", { class: "lab-axis", x: -(margin.top + plotH / 2), y: 13,
                                      transform: "rotate(-90)", "text-anchor": "middle" }, spec.yLabel));

    function path(x, y) {
      var d = "", pen = false;
      y.forEach(function (value, i) {
        if (value === null) { pen = false; return; }
        d += (pen ? "L" : "M") + X(x[i]).toFixed(1) + "," + Y(value).toFixed(1);
        pen = true;
      });
      return d;
    }
    spec.lines.forEach(function (line) {
      if (line.low) {
        var upper = path(line.x, line.high), lower = [];
        for (var i = line.x.length - 1; i >= 0; i--) {
          if (line.low[i] !== null) { lower.push("L" + X(line.x[i]).toFixed(1) + "," + Y(line.low[i]).toFixed(1)); }
        }
        svg.appendChild(svgNode("path", { class: "lab-band", d: upper + lower.join("") + "Z", fill: line.color,
                                          "data-series": line.id }));
      }
      svg.appendChild(svgNode("path", { class: "lab-line", d: path(line.x, line.y), stroke: line.color,
                                        "stroke-dasharray": line.dashed ? "6 4" : "none", "data-series": line.id,
                                        "data-y": JSON.stringify(line.y) }));
      line.y.forEach(function (value, i) {
        if (value === null || !(line.dots || i === line.marker)) { return; }
        svg.appendChild(svgNode("circle", { cx: X(line.x[i]), cy: Y(value), r: i === line.marker ? 5 : 2.5,
                                            fill: line.color, class: i === line.marker ? "lab-marker" : "" }));
      });
    });
    if (spec.empty) {
      svg.appendChild(svgNode("text", { class: "lab-empty", x: margin.left + plotW / 2, y: margin.top + plotH / 2,
                                        "text-anchor": "middle" }, spec.empty));
    }
    holder.textContent = "";
    holder.appendChild(svg);
  }

  // ------------------------------------------------------------------ rendering

  function fixed(value, digits) { return value === null || value === undefined ? "n/a" : value.toFixed(digits); }
  function percent(value) { return value === null || value === undefined ? "n/a" : Math.round(100 * value) + "%"; }
  function scientific(value) { return value === null || value === undefined ? "n/a" : value.toPrecision(2); }
  function last(values) {
    for (var i = values.length - 1; i >= 0; i--) { if (values[i] !== null) { return values[i]; } }
    return null;
  }
  function mean(values) {
    var kept = values.filter(function (v) { return v !== null; });
    return kept.length ? kept.reduce(function (s, v) { return s + v; }, 0) / kept.length : null;
  }

  // One algorithm's headline numbers for a state (null when the setting is not in the grid).
  Lab.prototype.numbers = function (state, algorithm) {
    var resolved = this.resolve(state, algorithm), series = resolved.series;
    if (!series) { return { resolved: resolved, missing: true }; }
    return { resolved: resolved, success: last(series.success.mean), rollouts: last(series.rollouts),
             acceptance: mean(series.acceptance), cosine: series.quality.cosine };
  };

  Lab.prototype.describe = function (numbers, before, first) {
    if (numbers.missing) {
      return this.label(numbers.resolved) + " is not defined for " + this.design(this.state.groupSize) +
             " (one rollout per prompt gives every group advantage 0)";
    }
    function was(now, then, format) {
      return then && !then.missing && format(then) !== format(now) ? " (was " + format(then) + ")" : "";
    }
    var success = function (n) { return fixed(n.success, 2); };
    var accept = function (n) { return percent(n.acceptance); };
    var cosine = function (n) { return fixed(n.cosine, 2); };
    var gate = this.gated(numbers.resolved.shown) ?
      "its gate accepting " + accept(numbers) + was(numbers, before, accept) + " of trajectories" :
      "with no gate (every trajectory used)";
    return this.label(numbers.resolved) + " ends at exact success " + success(numbers) +
      was(numbers, before, success) + (first ? " after " + Math.round(numbers.rollouts).toLocaleString("en-US") +
      " rollouts" : "") + ", " + gate + ", its update's cosine to ∇J " + cosine(numbers) +
      was(numbers, before, cosine);
  };

  Lab.prototype.changeText = function (before) {
    var s = this.state, axes = this.axes, self = this;
    if (!before) { return ""; }
    var parts = [];
    if (before.lagIndex !== s.lagIndex) { parts.push("lag L " + axes.lag[before.lagIndex] + " → " + axes.lag[s.lagIndex]); }
    if (before.delta !== s.delta) { parts.push("δ " + before.delta + " → " + s.delta); }
    if (before.groupSize !== s.groupSize) { parts.push("batch design " + self.design(before.groupSize) + " → " + self.design(s.groupSize)); }
    if (before.env !== s.env) { parts.push("environment " + name(ENV_NAMES, before.env) + " → " + name(ENV_NAMES, s.env)); }
    if (before.a !== s.a) { parts.push("algorithm " + name(ALGORITHM_NAMES, before.a) + " → " + name(ALGORITHM_NAMES, s.a)); }
    if (before.b !== s.b) { parts.push("comparison " + name(ALGORITHM_NAMES, before.b) + " → " + name(ALGORITHM_NAMES, s.b)); }
    return parts.length ? parts.join(", ").replace(/^[a-z]/, function (c) { return c.toUpperCase(); }) + ": " : "";
  };

  Lab.prototype.render = function (before) {
    var self = this, s = this.state, axes = this.axes;
    if (before === undefined) { before = this.lastBefore || null; } else { this.lastBefore = before; }
    this.lagValue.textContent = "L = " + axes.lag[s.lagIndex];
    var sides = [["a", s.a, false], ["b", s.b, true]].map(function (side) {
      return { id: side[0], algorithm: side[1], dashed: side[2], resolved: self.resolve(s, side[1]),
               numbers: self.numbers(s, side[1]),
               before: before && self.sameAlgorithms(before, s) ? self.numbers(before, side[1]) : null };
    });
    // The sentence: what moved, then each algorithm's numbers now (and before, where the algorithm is the same).
    var sentence = this.changeText(before) + sides.map(function (side, index) {
      return self.describe(side.numbers, side.before, index === 0);
    }).join("; ") + ". (" + name(ENV_NAMES, s.env) + ", " + this.design(s.groupSize) + ", L = " +
      axes.lag[s.lagIndex] + ", mean of " + this.data.config.seeds + " seeds.)";
    this.sentence.textContent = sentence;

    this.legend.textContent = "";
    sides.forEach(function (side) {
      var item = element("span", { class: "lab-legend-item" });
      var swatch = element("span", { class: "lab-swatch" + (side.dashed ? " lab-dashed" : "") });
      swatch.style.borderColor = COLORS[side.id];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(self.label(side.resolved) +
        (side.resolved.series ? "" : " — not defined for this design")));
      self.legend.appendChild(item);
    });

    var present = sides.filter(function (side) { return side.resolved.series; });
    chart(this.charts.success, {
      title: "exact success against rollouts", xLabel: "rollouts spent (k = thousand)", yLabel: "exact train success",
      yMin: 0, yMax: 1, xMin: 0,
      lines: present.map(function (side) {
        var series = side.resolved.series;
        return { id: side.id, color: COLORS[side.id], dashed: side.dashed, x: series.rollouts,
                 y: series.success.mean, low: series.success.low, high: series.success.high };
      }),
    });
    chart(this.charts.acceptance, {
      title: "gate acceptance over training", xLabel: "rollouts spent (k = thousand)",
      yLabel: "accepted (fraction)", yMin: 0, yMax: 1, xMin: 0,
      lines: present.map(function (side) {
        var series = side.resolved.series;
        return { id: side.id, color: COLORS[side.id], dashed: side.dashed, x: series.rollouts, y: series.acceptance,
                 dots: true };
      }),
    });
    chart(this.charts.quality, {
      title: "cosine of the update to the exact gradient against lag", xLabel: "policy lag L (learner updates)",
      yLabel: "cosine(ĝ, ∇J)", yMin: 0, yMax: 0.5, xTicks: axes.lag,
      lines: present.map(function (side) {
        var values = axes.lag.map(function (lag, i) {
          var series = self.resolve(Object.assign({}, s, { lagIndex: i }), side.algorithm).series;
          return series ? series.quality.cosine : null;
        });
        return { id: side.id, color: COLORS[side.id], dashed: side.dashed, x: axes.lag, y: values,
                 marker: s.lagIndex, dots: true };
      }),
    });
    this.renderTable(sides);
  };

  Lab.prototype.sameAlgorithms = function (before, now) {
    return before.a === now.a && before.b === now.b && before.env === now.env;
  };

  Lab.prototype.renderTable = function (sides) {
    var self = this, table = element("table", { class: "lab-quality" });
    var head = element("tr");
    ["at L = " + this.axes.lag[this.state.lagIndex], "cosine", "bias", "variance", "accepted"].forEach(function (text) { head.appendChild(element("th", {}, text)); });
    table.appendChild(head);
    sides.forEach(function (side) {
      var quality = side.resolved.series ? side.resolved.series.quality : {};
      var row = element("tr", { "data-series": side.id });
      row.appendChild(element("td", {}, self.label(side.resolved)));
      row.appendChild(element("td", {}, fixed(quality.cosine, 3)));
      row.appendChild(element("td", {}, scientific(quality.bias)));
      row.appendChild(element("td", {}, scientific(quality.variance)));
      row.appendChild(element("td", {}, percent(quality.acceptance)));
      table.appendChild(row);
    });
    this.table.textContent = "";
    this.table.appendChild(table);
    var norm = sides.map(function (side) { return side.resolved.series; }).filter(Boolean)[0];
    if (norm) {
      this.table.appendChild(element("p", { class: "lab-note" }, "Cosine: of ĝ to ∇J, mean over batches; bias: ‖E ĝ − ∇J‖; variance: E‖ĝ − E ĝ‖²; accepted: the gate's acceptance in " +
        "these batches. ‖∇J‖ = " + scientific(norm.quality.gradient_norm) +
        " at the fixed policy (" + name(ENV_NAMES, this.state.env) + ", " + this.data.config.quality_steps +
        " exact-ascent steps from uniform); " + this.data.config.quality_batches.toLocaleString("en-US") +
        " batches of " +
        this.data.config.budget + " rollouts per measurement."));
    }
  };

  function start() {
    var root = document.getElementById("flashsim-lab");
    if (!root) { return; }
    if (!window.FLASHSIM_LAB) {
      root.textContent = "The lab's data (data.js) did not load.";
      return;
    }
    window.flashsimLab = new Lab(root, window.FLASHSIM_LAB);
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
