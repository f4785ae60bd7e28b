-- seqc's language server for .seq files (Neovim 0.10+). Put this file in
-- ~/.config/nvim/plugin/ (or require it from init.lua); `seqc` must be on PATH
-- (or set cmd to the full path of .venv/bin/seqc).
vim.filetype.add({ extension = { seq = "seq" } })

vim.api.nvim_create_autocmd("FileType", {
  pattern = "seq",
  callback = function(args)
    vim.bo[args.buf].commentstring = "# %s"
    vim.lsp.start({
      name = "seqc",
      cmd = { "seqc", "lsp" },
      root_dir = vim.fs.root(args.buf, { "seqc.toml", "pyproject.toml", ".git" }),
    })
  end,
})

-- With nvim-lspconfig instead, register it once as a custom server:
--   local configs = require("lspconfig.configs")
--   configs.seqc = { default_config = {
--     cmd = { "seqc", "lsp" }, filetypes = { "seq" },
--     root_dir = require("lspconfig.util").root_pattern("seqc.toml", "pyproject.toml", ".git"),
--   } }
--   require("lspconfig").seqc.setup({})
