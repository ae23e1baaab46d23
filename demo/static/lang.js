(lang) => {
  const zh = lang === '中文';
  document.documentElement.lang = zh ? 'zh-CN' : 'en';
  document.body.classList.toggle('lang-zh', zh);
  return lang;
}
