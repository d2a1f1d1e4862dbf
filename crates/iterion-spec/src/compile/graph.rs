//! The workflow as a graph: name lookups built once, adjacency lists, and the graph with `done` and `fail`
//! as nodes (reachability, back edges, availability) that the graph rules and the reference checks query.

use std::cell::RefCell;

use super::hash::FxMap;
use crate::model::{Edge, Node, Prompt, Schema, Var, Workflow};

/// No node: the end of an edge that is a terminal or an unknown name.
pub(super) const NO_NODE: u32 = u32::MAX;

/// Adjacency lists in compressed form: the items of list `i` are `items[start[i]..start[i + 1]]`, in the
/// order they were added (edge order). One allocation per table instead of one per node.
struct Csr<T> {
    start: Vec<u32>,
    items: Vec<T>,
}

impl<T: Copy + Default> Csr<T> {
    /// Builds the lists from `(list, item)` pairs given twice by `pairs` (a count pass, then a fill pass).
    fn build<I: Iterator<Item = (u32, T)>>(lists: usize, pairs: impl Fn() -> I) -> Csr<T> {
        let mut start = vec![0u32; lists + 1];
        for (l, _) in pairs() {
            start[l as usize + 1] += 1;
        }
        for i in 0..lists {
            start[i + 1] += start[i];
        }
        let mut fill: Vec<u32> = start[..lists].to_vec();
        let mut items = vec![T::default(); start[lists] as usize];
        for (l, t) in pairs() {
            let f = &mut fill[l as usize];
            items[*f as usize] = t;
            *f += 1;
        }
        Csr { start, items }
    }

    fn of(&self, i: usize) -> &[T] {
        &self.items[self.start[i] as usize..self.start[i + 1] as usize]
    }
}

/// Name lookups over a workflow, built once (the model's own lookups are linear scans), and the node
/// indices of every edge's ends. Derefs to the workflow; its inherent methods shadow the model's linear ones.
pub(super) struct Ix<'w> {
    w: &'w Workflow,
    node_ix: FxMap<&'w str, u32>,
    schema_ix: FxMap<&'w str, &'w Schema>,
    prompt_ix: FxMap<&'w str, u32>,
    var_ix: FxMap<&'w str, &'w Var>,
    /// `(from, to)` node indices per edge ([`NO_NODE`] for a terminal or unknown name)
    pub(super) ends: Vec<(u32, u32)>,
    /// edge indices by source node, in edge order
    out: Csr<u32>,
}

impl std::ops::Deref for Ix<'_> {
    type Target = Workflow;
    fn deref(&self) -> &Workflow {
        self.w
    }
}

fn name_map<'w, T>(items: &'w [T], name: impl Fn(&'w T) -> &'w str) -> FxMap<&'w str, u32> {
    let mut m = FxMap::with_capacity_and_hasher(items.len(), Default::default());
    for (i, x) in items.iter().enumerate() {
        m.insert(name(x), i as u32);
    }
    m
}

impl<'w> Ix<'w> {
    pub(super) fn new(w: &'w Workflow) -> Ix<'w> {
        let node_ix = name_map(&w.nodes, |n| n.name.value.as_str());
        let ix = |s: &str| node_ix.get(s).copied().unwrap_or(NO_NODE);
        let ends: Vec<(u32, u32)> = w
            .edges
            .iter()
            .map(|e| (ix(&e.from.value), ix(&e.to.value)))
            .collect();
        let out = Csr::build(w.nodes.len(), || {
            ends.iter()
                .enumerate()
                .filter(|(_, (a, _))| *a != NO_NODE)
                .map(|(i, (a, _))| (*a, i as u32))
        });
        Ix {
            w,
            schema_ix: w.schemas.iter().map(|s| (s.name.value.as_str(), s)).collect(),
            prompt_ix: name_map(&w.prompts, |p| p.name.value.as_str()),
            var_ix: w.vars.iter().map(|v| (v.name.value.as_str(), v)).collect(),
            node_ix,
            ends,
            out,
        }
    }

    pub(super) fn node(&self, name: &str) -> Option<&'w Node> {
        self.node_index(name).map(|i| &self.w.nodes[i])
    }

    pub(super) fn node_index(&self, name: &str) -> Option<usize> {
        self.node_ix.get(name).map(|i| *i as usize)
    }

    pub(super) fn schema(&self, name: &str) -> Option<&'w Schema> {
        self.schema_ix.get(name).copied()
    }

    pub(super) fn prompt(&self, name: &str) -> Option<&'w Prompt> {
        self.prompt_index(name).map(|i| &self.w.prompts[i])
    }

    pub(super) fn prompt_index(&self, name: &str) -> Option<usize> {
        self.prompt_ix.get(name).map(|i| *i as usize)
    }

    pub(super) fn var(&self, name: &str) -> Option<&'w Var> {
        self.var_ix.get(name).copied()
    }

    /// The out-edges of node `i`, in edge order.
    pub(super) fn edges_from(&self, i: usize) -> impl Iterator<Item = &'w Edge> + '_ {
        let edges = &self.w.edges;
        self.out.of(i).iter().map(move |&e| &edges[e as usize])
    }
}

/// The node graph with `done` and `fail` as nodes `n` and `n + 1`; edges in declaration order.
pub(super) struct Full {
    /// declared nodes (`done` is `n`, `fail` is `n + 1`)
    n: usize,
    /// `(target, edge index)` per source, in edge order
    succ: Vec<Vec<(u32, u32)>>,
    /// the node is the source or the target of some loop edge
    pub(super) loop_end: Vec<bool>,
    /// the node is the target of some loop edge
    pub(super) loop_target: Vec<bool>,
    /// `(from, to)` per edge in this numbering ([`NO_NODE`] for an unknown name)
    pub(super) ends: Vec<(u32, u32)>,
    /// search state reused by every availability query: (stamp, visit stamps, stack)
    search: RefCell<(u32, Vec<u32>, Vec<u32>)>,
}

impl Full {
    pub(super) fn new(w: &Ix<'_>) -> Full {
        let n = w.nodes.len();
        let map = |ix: u32, name: &str| match (ix, name) {
            (i, _) if i != NO_NODE => i,
            (_, "done") => n as u32,
            (_, "fail") => n as u32 + 1,
            _ => NO_NODE,
        };
        let ends: Vec<(u32, u32)> = w
            .edges
            .iter()
            .zip(&w.ends)
            .map(|(e, &(a, b))| (map(a, &e.from.value), map(b, &e.to.value)))
            .collect();
        let mut succ = vec![Vec::new(); n + 2];
        let mut loop_end = vec![false; n + 2];
        let mut loop_target = vec![false; n + 2];
        for (i, (e, &(a, b))) in w.edges.iter().zip(&ends).enumerate() {
            if a != NO_NODE && b != NO_NODE {
                succ[a as usize].push((b, i as u32));
            }
            if e.loop_spec.is_some() {
                for x in [a, b].into_iter().filter(|&x| x != NO_NODE) {
                    loop_end[x as usize] = true;
                }
                if b != NO_NODE {
                    loop_target[b as usize] = true;
                }
            }
        }
        Full {
            n,
            succ,
            loop_end,
            loop_target,
            ends,
            search: RefCell::new((0, vec![0; n + 2], Vec::new())),
        }
    }

    /// The index of a node name (`done` and `fail` included).
    pub(super) fn index(&self, w: &Ix<'_>, name: &str) -> Option<usize> {
        w.node_index(name).or(match name {
            "done" => Some(self.n),
            "fail" => Some(self.n + 1),
            _ => None,
        })
    }

    /// Whether `p` has produced output before consumer `c` runs: a path of one edge or more leads from `p` to
    /// `c`; `c` itself only when it is the target of a loop edge, or when `itself` (an edge mapping, rendered
    /// after its source finished).
    pub(super) fn available(&self, p: usize, c: usize, itself: bool) -> bool {
        if p == c {
            return itself || self.loop_target[c];
        }
        // a depth-first search that stops at `c`; the visit marks are stamps, so nothing is cleared per query
        let mut guard = self.search.borrow_mut();
        let (stamp, seen, stack) = &mut *guard;
        *stamp = stamp.wrapping_add(1);
        if *stamp == 0 {
            seen.iter_mut().for_each(|x| *x = 0);
            *stamp = 1;
        }
        let cur = *stamp;
        stack.clear();
        stack.extend(self.succ[p].iter().map(|x| x.0));
        while let Some(x) = stack.pop() {
            let x = x as usize;
            if x == c {
                return true;
            }
            if std::mem::replace(&mut seen[x], cur) == cur {
                continue;
            }
            stack.extend(
                self.succ[x]
                    .iter()
                    .map(|s| s.0)
                    .filter(|&m| seen[m as usize] != cur),
            );
        }
        false
    }

    /// Every node reached from `entry` through edges of any kind (`entry` included).
    pub(super) fn reachable(&self, entry: usize) -> Vec<bool> {
        let mut seen = vec![false; self.succ.len()];
        let mut stack = vec![entry as u32];
        while let Some(x) = stack.pop() {
            if std::mem::replace(&mut seen[x as usize], true) {
                continue;
            }
            stack.extend(self.succ[x as usize].iter().map(|s| s.0));
        }
        seen
    }

    /// The back edges of a depth-first search over every edge, in edge order, from `entry`, then from every
    /// node with out-edges not visited yet (declaration order): `(cycle names, edge index)`.
    pub(super) fn back_edges(
        &self,
        entry: Option<usize>,
        name: impl Fn(usize) -> String,
    ) -> Vec<(Vec<String>, usize)> {
        #[derive(Clone, Copy, PartialEq)]
        enum C {
            White,
            Grey,
            Black,
        }
        let total = self.succ.len();
        let mut color = vec![C::White; total];
        let mut out = Vec::new();
        let starts = entry.into_iter().chain(0..total);
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for start in starts {
            if color[start] != C::White || (Some(start) != entry && self.succ[start].is_empty()) {
                continue;
            }
            stack.push((start, 0));
            color[start] = C::Grey;
            while let Some(top) = stack.last_mut() {
                let (node, idx) = *top;
                top.1 += 1;
                match self.succ[node].get(idx) {
                    None => {
                        color[node] = C::Black;
                        stack.pop();
                    }
                    Some(&(to, edge)) => {
                        let to = to as usize;
                        match color[to] {
                            C::White => {
                                color[to] = C::Grey;
                                stack.push((to, 0));
                            }
                            C::Grey => {
                                let pos = stack.iter().position(|(m, _)| *m == to).unwrap_or(0);
                                let mut cyc: Vec<String> =
                                    stack[pos..].iter().map(|(m, _)| name(*m)).collect();
                                cyc.push(name(to));
                                out.push((cyc, edge as usize));
                            }
                            C::Black => {}
                        }
                    }
                }
            }
        }
        out
    }
}

/// The router mode (`fan_out_all` when absent).
pub(super) fn router_mode(n: &Node) -> &str {
    n.router_mode.as_ref().map_or("fan_out_all", |m| m.value.as_str())
}
