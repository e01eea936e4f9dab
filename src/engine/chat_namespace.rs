//! A static check that a chat template never stores a `namespace` inside a namespace.
//!
//! Why: minijinja 3.1 formats, serialises and compares values recursively with no depth limit,
//! so a namespace that reaches itself (`{% set ns.n = ns %}{{ ns }}`, or through a list or map)
//! overflows the stack, and a stack overflow aborts the whole process: no error can be caught.
//! The fuzzer found this. Namespaces are the only mutable values in a template, so they are the
//! only way to build a cycle, and no model's template we know of nests them. This pass rejects
//! every template in which a namespace (or a value that may contain one) could flow into a
//! namespace attribute or into `namespace(...)`'s arguments, before the template can be rendered.
//!
//! The analysis is flow-insensitive and ignores scopes: a name that may hold a namespace anywhere
//! is treated as holding one everywhere. That over-approximates, which is the safe direction: a
//! rejected template gets a clear error, an accepted one can never build a cycle. It walks
//! minijinja's parser AST (`unstable_machinery`), because minijinja has no hook on attribute
//! assignment and its public API exposes no syntax tree.

use std::collections::{HashMap, HashSet};

use minijinja::machinery::ast::{self, CallArg, Expr, Stmt};
use minijinja::syntax::SyntaxConfig;

/// What a value may hold, ordered so that the join of two is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Holds {
    /// Never a namespace.
    Plain,
    /// A namespace itself (or a plain value): its attributes are plain, by the invariant this
    /// check enforces.
    Namespace,
    /// Possibly a container with a namespace somewhere inside it.
    Anything,
}

/// Names the engine binds that can carry the items of a loop or the arguments of a call.
const LOOP_VARIABLE: &str = "loop";
const MACRO_EXTRAS: [&str; 3] = ["varargs", "kwargs", "caller"];

#[derive(Default)]
struct Flow<'a> {
    names: HashMap<&'a str, Holds>,
    macro_params: HashSet<&'a str>,
    /// Whether some call passes a value that may hold a namespace, so that any macro parameter
    /// may hold one.
    call_args_tainted: bool,
    changed: bool,
    /// Whether this walk reports violations (only the last one, once the levels are final).
    report: bool,
    /// The first violation found, described for the error message.
    violation: Option<String>,
}

/// Returns why the template could nest a namespace inside a namespace, or `None` when it cannot.
/// A template that does not parse is left to the compiler's own error.
pub(crate) fn nesting_violation(source: &str, syntax: SyntaxConfig) -> Option<String> {
    let tree = minijinja::machinery::parse(source, "chat_template", syntax).ok()?;
    let mut flow = Flow::default();
    // Levels only rise and are bounded, so this reaches a fixpoint; the cap is a guard.
    for _ in 0..64 {
        flow.changed = false;
        flow.stmt(&tree);
        if !flow.changed {
            break;
        }
    }
    flow.violation = None;
    flow.report = true;
    flow.stmt(&tree);
    flow.violation
}

impl<'a> Flow<'a> {
    fn level(&self, name: &str) -> Holds {
        let bound = self.names.get(name).copied().unwrap_or(Holds::Plain);
        let from_call = if self.call_args_tainted
            && (self.macro_params.contains(name) || MACRO_EXTRAS.contains(&name))
        {
            Holds::Anything
        } else {
            Holds::Plain
        };
        bound.max(from_call)
    }

    fn raise(&mut self, name: &'a str, holds: Holds) {
        let entry = self.names.entry(name).or_insert(Holds::Plain);
        if holds > *entry {
            *entry = holds;
            self.changed = true;
        }
    }

    /// Binds every variable in an assignment target (a name or a tuple of names).
    fn bind(&mut self, target: &Expr<'a>, holds: Holds) {
        match target {
            Expr::Var(var) => self.raise(var.id, holds),
            // Unpacking (`{% set a, b = … %}`, `{% for k, v in … %}`; the parser gives a list
            // or a tuple) hands out the container's items, which may be anything it held.
            Expr::Tuple(tuple) => self.bind_items(&tuple.items, holds),
            Expr::List(list) => self.bind_items(&list.items, holds),
            Expr::GetAttr(attr) => {
                if holds != Holds::Plain && self.report && self.violation.is_none() {
                    self.violation = Some(format!(
                        "`{{% set ….{} = … %}}` may store a namespace inside a namespace",
                        attr.name
                    ));
                }
                self.expr(&attr.expr);
            }
            other => {
                self.expr(other);
            }
        }
    }

    fn bind_items(&mut self, targets: &[Expr<'a>], holds: Holds) {
        let item = if holds == Holds::Plain {
            Holds::Plain
        } else {
            Holds::Anything
        };
        for target in targets {
            self.bind(target, item);
        }
    }

    fn body(&mut self, stmts: &[Stmt<'a>]) {
        for stmt in stmts {
            self.stmt(stmt);
        }
    }

    fn stmt(&mut self, stmt: &Stmt<'a>) {
        match stmt {
            Stmt::Template(t) => self.body(&t.children),
            Stmt::EmitExpr(e) => {
                self.expr(&e.expr);
            }
            Stmt::EmitRaw(_) => {}
            Stmt::ForLoop(for_loop) => {
                let iter = self.expr(&for_loop.iter);
                let item = if iter == Holds::Plain {
                    Holds::Plain
                } else {
                    Holds::Anything
                };
                self.bind(&for_loop.target, item);
                // `loop.previtem`, `loop.nextitem` and `loop(...)` hand out the same items.
                self.raise(LOOP_VARIABLE, item);
                if let Some(filter) = &for_loop.filter_expr {
                    self.expr(filter);
                }
                self.body(&for_loop.body);
                self.body(&for_loop.else_body);
            }
            Stmt::IfCond(cond) => {
                self.expr(&cond.expr);
                self.body(&cond.true_body);
                self.body(&cond.false_body);
            }
            Stmt::WithBlock(with) => {
                for (target, value) in &with.assignments {
                    let holds = self.expr(value);
                    self.bind(target, holds);
                }
                self.body(&with.body);
            }
            Stmt::Set(set) => {
                let holds = self.expr(&set.expr);
                self.bind(&set.target, holds);
            }
            Stmt::SetBlock(set) => {
                // The captured body is a string.
                if let Some(filter) = &set.filter {
                    self.expr(filter);
                }
                self.body(&set.body);
                self.bind(&set.target, Holds::Plain);
            }
            Stmt::AutoEscape(block) => {
                self.expr(&block.enabled);
                self.body(&block.body);
            }
            Stmt::FilterBlock(block) => {
                self.expr(&block.filter);
                self.body(&block.body);
            }
            Stmt::Block(block) => self.body(&block.body),
            Stmt::Macro(mac) => self.macro_decl(mac),
            Stmt::CallBlock(call) => {
                self.call(&call.call);
                self.macro_decl(&call.macro_decl);
            }
            Stmt::Do(d) => {
                self.call(&d.call);
            }
            // Templates are registered alone, without a loader, so these fail at render time.
            Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Extends(_) | Stmt::Include(_) => {}
            Stmt::Continue(_) | Stmt::Break(_) => {}
        }
    }

    fn macro_decl(&mut self, mac: &ast::Macro<'a>) {
        for arg in &mac.args {
            if let Expr::Var(var) = arg {
                if self.macro_params.insert(var.id) {
                    self.changed = true;
                }
            }
        }
        // Defaults line up with the last parameters.
        let first_defaulted = mac.args.len().saturating_sub(mac.defaults.len());
        for (arg, default) in mac.args[first_defaulted..].iter().zip(&mac.defaults) {
            let holds = self.expr(default);
            self.bind(arg, holds);
        }
        self.body(&mac.body);
    }

    fn call(&mut self, call: &ast::Call<'a>) -> Holds {
        let args = self.call_args(&call.args);
        if let Expr::Var(var) = &call.expr {
            if var.id == "namespace" {
                if args != Holds::Plain && self.report && self.violation.is_none() {
                    self.violation =
                        Some("`namespace(...)` may be given a namespace as a value".to_string());
                }
                return Holds::Namespace;
            }
        }
        if args != Holds::Plain && !self.call_args_tainted {
            self.call_args_tainted = true;
            self.changed = true;
        }
        let callee = match &call.expr {
            // A method's receiver flows into its result (`items()`, `copy()`, …).
            Expr::GetAttr(attr) => self.expr(&attr.expr),
            other => self.expr(other),
        };
        if callee.max(args) == Holds::Plain {
            Holds::Plain
        } else {
            Holds::Anything
        }
    }

    fn call_args(&mut self, args: &[CallArg<'a>]) -> Holds {
        let mut holds = Holds::Plain;
        for arg in args {
            let value = match arg {
                CallArg::Pos(e)
                | CallArg::Kwarg(_, e)
                | CallArg::PosSplat(e)
                | CallArg::KwargSplat(e) => self.expr(e),
            };
            holds = holds.max(value);
        }
        holds
    }

    /// What the expression's value may hold.
    fn expr(&mut self, expr: &Expr<'a>) -> Holds {
        let contained = |holds: Holds| {
            if holds == Holds::Plain {
                Holds::Plain
            } else {
                Holds::Anything
            }
        };
        match expr {
            Expr::Var(var) => self.level(var.id),
            Expr::Const(_) => Holds::Plain,
            Expr::Slice(slice) => {
                for bound in [&slice.start, &slice.stop, &slice.step]
                    .into_iter()
                    .flatten()
                {
                    self.expr(bound);
                }
                contained(self.expr(&slice.expr))
            }
            Expr::UnaryOp(op) => {
                self.expr(&op.expr);
                Holds::Plain
            }
            Expr::BinOp(op) => {
                let left = self.expr(&op.left);
                let right = self.expr(&op.right);
                match op.op {
                    // `and`/`or` return one of their operands as it is.
                    ast::BinOpKind::ScAnd | ast::BinOpKind::ScOr => left.max(right),
                    ast::BinOpKind::Add | ast::BinOpKind::Mul => contained(left.max(right)),
                    _ => Holds::Plain,
                }
            }
            Expr::Compare(cmp) => {
                self.expr(&cmp.expr);
                for op in &cmp.ops {
                    self.expr(&op.expr);
                }
                Holds::Plain
            }
            Expr::IfExpr(e) => {
                self.expr(&e.test_expr);
                let yes = self.expr(&e.true_expr);
                let no = e.false_expr.as_ref().map_or(Holds::Plain, |f| self.expr(f));
                yes.max(no)
            }
            Expr::Filter(filter) => {
                let input = filter.expr.as_ref().map_or(Holds::Plain, |e| self.expr(e));
                let args = self.call_args(&filter.args);
                contained(input.max(args))
            }
            Expr::Test(test) => {
                self.expr(&test.expr);
                self.call_args(&test.args);
                Holds::Plain
            }
            Expr::GetAttr(attr) => {
                let base = self.expr(&attr.expr);
                // A namespace's attributes are plain by the invariant; a container's are not.
                if base == Holds::Anything {
                    Holds::Anything
                } else {
                    Holds::Plain
                }
            }
            Expr::GetItem(item) => {
                let base = self.expr(&item.expr);
                self.expr(&item.subscript_expr);
                if base == Holds::Anything {
                    Holds::Anything
                } else {
                    Holds::Plain
                }
            }
            Expr::Call(call) => self.call(call),
            Expr::List(list) => {
                let mut holds = Holds::Plain;
                for item in &list.items {
                    holds = holds.max(self.expr(item));
                }
                contained(holds)
            }
            Expr::Tuple(tuple) => {
                let mut holds = Holds::Plain;
                for item in &tuple.items {
                    holds = holds.max(self.expr(item));
                }
                contained(holds)
            }
            Expr::Map(map) => {
                let mut holds = Holds::Plain;
                for item in map.keys.iter().chain(&map.values) {
                    holds = holds.max(self.expr(item));
                }
                contained(holds)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(source: &str) -> Option<String> {
        nesting_violation(source, SyntaxConfig::default())
    }

    #[test]
    fn real_templates_pass() {
        for source in [
            // Qwen3's namespace use.
            "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\
             {%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}\
             {%- if ns.multi_step_tool and message.role == 'user' %}{%- set ns.multi_step_tool = false %}\
             {%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}{{ ns.last_query_index }}",
            // Accumulating plain values in a namespace.
            "{% set ns = namespace(parts=[]) %}{% for m in messages %}{% set ns.parts = ns.parts + [m.content] %}{% endfor %}{{ ns.parts|join(',') }}",
            "{% macro m(x) %}{{ x }}{% endmacro %}{% set ns = namespace(a=1) %}{% set ns.a = m(ns.a) %}",
        ] {
            assert_eq!(violation(source), None, "{source}");
        }
    }

    #[test]
    fn every_way_to_nest_a_namespace_is_caught() {
        for source in [
            "{% set ns = namespace() %}{% set ns.n = ns %}{{ ns }}",
            "{% set ns = namespace() %}{% set ns.n = [ns] %}{{ ns.n }}",
            "{% set ns = namespace() %}{% set ns.n = {'a': ns} %}",
            "{% set ns = namespace() %}{% set other = ns %}{% set other.n = other %}",
            "{% set a = namespace() %}{% set b = namespace(x=a) %}",
            "{% set ns = namespace() %}{% set m = {'a': ns} %}{% set ns.x = m.a %}",
            "{% set ns = namespace() %}{% for x in [ns] %}{% set ns.x = x %}{% endfor %}",
            "{% set ns = namespace() %}{% for x in [ns] %}{% set ns.x = loop.previtem %}{% endfor %}",
            "{% set ns = namespace() %}{% macro m(p) %}{% set ns.x = p %}{% endmacro %}{{ m(ns) }}",
            "{% set ns = namespace() %}{% set ns.x = ns if true else 1 %}",
            "{% set ns = namespace() %}{% set ns.x = ns or 1 %}",
            "{% set ns = namespace() %}{% set ns.x = [ns]|first %}",
            "{% set ns = namespace() %}{% set a, b = [ns, 1] %}{% set ns.x = a %}",
            "{% set ns.x = ns %}{% set ns = namespace() %}",
            "{% set ns = namespace() %}{% for k, v in {'a': ns}|items %}{% set ns.x = v %}{% endfor %}",
        ] {
            assert!(violation(source).is_some(), "{source}");
        }
    }
}
