//! Reading `spec/mpi.spec`: the standard's types, constants and C bindings.

/// One line (or block) of the table.
pub enum Item {
    Include(String),
    Define(String, String),
    Scalar(String, String),
    Struct(String, Vec<String>),
    Handle(String, String),
    Value {
        ty: String,
        name: String,
        value: String,
    },
    Alias(String, String),
    Pointer {
        name: String,
        ty: String,
        value: String,
    },
    Enum(Vec<(String, String)>),
    CType(String),
    Raw(String),
    Global(String),
    Function(Function),
}

/// A C binding.
pub struct Function {
    pub ret: String,
    pub name: String,
    pub params: Vec<Param>,
    /// Whether the binding ends in `...`.
    pub variadic: bool,
}

/// A parameter of a C binding.
pub struct Param {
    /// As the table writes it (`const int recvcounts[]`).
    pub text: String,
    pub name: String,
    /// The base type (`int`, `MPI_Comm`, `void`).
    pub base: String,
    /// Pointer levels, `[]` counting as one.
    pub pointers: usize,
    /// Whether the outermost pointee is `const`.
    pub constant: bool,
}

/// Parse the table.
pub fn parse(text: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fail = |why: &str| -> ! { panic!("spec/mpi.spec:{}: {why}: {line}", n + 1) };
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let words: Vec<&str> = rest.split_whitespace().collect();
        let item = match (word, words.as_slice()) {
            ("include", [h]) => Item::Include(h.to_string()),
            ("define", [name, v]) => Item::Define(name.to_string(), v.to_string()),
            ("scalar", [name, ty]) => Item::Scalar(name.to_string(), ty.to_string()),
            ("handle", [name, tag]) => Item::Handle(name.to_string(), tag.to_string()),
            ("value", [ty, name, v]) => Item::Value {
                ty: ty.to_string(),
                name: name.to_string(),
                value: v.to_string(),
            },
            ("alias", [name, other]) => Item::Alias(name.to_string(), other.to_string()),
            ("pointer", [name, ty, v]) => Item::Pointer {
                name: name.to_string(),
                ty: ty.to_string(),
                value: v.to_string(),
            },
            ("struct", _) => {
                let (name, fields) = rest.split_once('{').unwrap_or_else(|| fail("no fields"));
                let fields = fields.trim().trim_end_matches('}');
                Item::Struct(
                    name.trim().to_string(),
                    fields
                        .split(';')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(str::to_string)
                        .collect(),
                )
            }
            ("enum", ["{"]) => {
                let mut values = Vec::new();
                for (_, l) in lines.by_ref() {
                    let l = l.trim();
                    if l == "}" {
                        break;
                    }
                    match l.split_whitespace().collect::<Vec<_>>()[..] {
                        [name, v] => values.push((name.to_string(), v.to_string())),
                        _ => fail("an enum line is NAME VALUE"),
                    }
                }
                Item::Enum(values)
            }
            ("ctype", _) => Item::CType(rest.to_string()),
            ("raw", _) => Item::Raw(rest.to_string()),
            ("global", _) => Item::Global(rest.to_string()),
            ("function", _) => {
                Item::Function(function(rest).unwrap_or_else(|| fail("bad binding")))
            }
            _ => fail("unknown line"),
        };
        items.push(item);
    }
    items
}

/// `RET NAME(PARAMS)`.
fn function(text: &str) -> Option<Function> {
    let open = text.find('(')?;
    let head = &text[..open];
    let params = text[open + 1..].strip_suffix(')')?;
    let variadic = params.trim_end().ends_with("...");
    let name_at = head.rfind(|c: char| !(c.is_alphanumeric() || c == '_'))? + 1;
    let name = head[name_at..].to_string();
    let ret = head[..name_at].trim().to_string();
    let params = match params.trim() {
        "void" | "" => Vec::new(),
        list => list
            .split(',')
            .map(str::trim)
            // A variadic tail: the fixed parameters are all the callee sees (the C
            // calling convention of x86-64 lets a fixed-argument function serve a
            // variadic declaration).
            .filter(|p| *p != "...")
            .map(param)
            .collect::<Option<_>>()?,
    };
    Some(Function {
        ret,
        name,
        params,
        variadic,
    })
}

/// One parameter: `const int recvcounts[]`, `char ***argv`, `int ranges[][3]`.
fn param(text: &str) -> Option<Param> {
    let mut pointers = text.matches('*').count();
    let mut rest = text.replace('*', " ");
    // Array suffixes: `[]` and `[][3]` are one pointer level each `[` group before a
    // sized one; a sized dimension belongs to the pointee, which we do not model.
    if let Some(i) = rest.find('[') {
        pointers += 1;
        rest.truncate(i);
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (name, ty) = words.split_last()?;
    let constant = ty.first() == Some(&"const");
    let base = ty
        .iter()
        .filter(|w| **w != "const")
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    Some(Param {
        text: text.to_string(),
        name: name.to_string(),
        base,
        pointers,
        constant,
    })
}
